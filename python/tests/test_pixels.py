"""A built-in transform split in two, as feedline.ray's workers and ranks
run it: the pixel steps (feedline._native._pixel_steps) in one loader,
the output steps (feedline._native._expand_pixels: to-f32, normalize, chw)
on its uint8 [n, H, W, 3] batches, give the whole transform's batches to
the bit; Loader.image_fields names the fields the transform decodes; bad
inputs are ValueErrors naming what does not fit."""

import numpy as np
import pytest

import feedline
from feedline import _native
from test_transform import make_png_tar


def batches(tar, spec, **kw):
    with feedline.Loader(files=[tar], rank=0, world_size=1, batch_size=4, shuffle=5, seed=11,
                         passes=1, deterministic=True, workers=2, transform=spec, **kw) as l:
        out = [(dict(b), b.origins) for b in l]
        return out, l.image_fields


@pytest.mark.parametrize("spec", [
    "imagenet-train",
    "imagenet-eval",
    "decode,random-resized-crop(24),flip(0.5),to-f32",
    "decode,resize(28),center-crop(20),flip(1),chw",
    "decode,resize(24x30),normalize(mean=0.5:0.4:0.3,std=0.2:0.3:0.4)",
])
def test_pixel_steps_then_output_steps_equal_the_transform(tmp_path, spec):
    tar, _ = make_png_tar(tmp_path, n=13)
    whole, fields = batches(tar, spec)
    pixel_spec = _native._pixel_steps(spec)
    assert pixel_spec is not None and "normalize" not in pixel_spec and "chw" not in pixel_spec
    pixels, pixel_fields = batches(tar, pixel_spec)
    assert fields == pixel_fields == ["png"]
    assert len(whole) == len(pixels) == 4
    for (w, wo), (p, po) in zip(whole, pixels):
        assert wo == po
        assert p["png"].dtype == np.uint8 and p["png"].shape[-1] == 3
        out = _native._expand_pixels(p["png"], spec)
        assert out.dtype == w["png"].dtype and out.shape == w["png"].shape
        # to the bit (float32 compared as integers)
        view = np.uint32 if out.dtype == np.float32 else np.uint8
        assert np.array_equal(out.view(view), np.asarray(w["png"]).view(view)), spec
        assert out.ctypes.data % 64 == 0
        assert np.array_equal(p["cls"], w["cls"])


def test_pixel_steps_of_a_transform_without_output_steps_is_none():
    assert _native._pixel_steps("decode,resize(32)") is None
    assert _native._pixel_steps("decode") is None
    with pytest.raises(ValueError, match="transform=\"no-such\""):
        _native._pixel_steps("no-such")


def test_image_fields(tmp_path):
    tar, _ = make_png_tar(tmp_path, n=3)
    with feedline.Loader(files=[tar], batch_size=2, passes=1, transform="decode,resize(8)") as l:
        assert l.image_fields is None  # found on the first instance transformed
        next(l)
        assert l.image_fields == ["png"]
    with feedline.Loader(files=[tar], batch_size=2, passes=1) as l:
        next(l)
        assert l.image_fields is None


def test_expand_pixels_takes_read_only_and_empty_arrays():
    px = np.arange(2 * 3 * 4 * 3, dtype=np.uint8).reshape(2, 3, 4, 3)
    px.setflags(write=False)  # as Ray's object store hands arrays out
    out = _native._expand_pixels(px, "decode,to-f32,chw")
    assert out.shape == (2, 3, 3, 4) and out.dtype == np.float32
    assert np.array_equal(out, px.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255))
    chw = _native._expand_pixels(px, "decode,chw")
    assert chw.dtype == np.uint8 and np.array_equal(chw, px.transpose(0, 3, 1, 2))
    empty = _native._expand_pixels(np.zeros((0, 5, 6, 3), np.uint8), "imagenet-eval")
    assert empty.shape == (0, 3, 5, 6) and empty.dtype == np.float32


@pytest.mark.parametrize("pixels, spec, words", [
    (np.zeros((2, 4, 4, 3), np.float32), "imagenet-train", 'found typestr "<f4"'),
    (np.zeros((2, 4, 4), np.uint8), "imagenet-train", r"shape \[2, 4, 4\]"),
    (np.zeros((2, 4, 4, 4), np.uint8), "imagenet-train", r"shape \[2, 4, 4, 4\]"),
    (np.zeros((2, 4, 8, 3), np.uint8)[:, :, ::2], "imagenet-train", "C-contiguous"),
    ([[1, 2, 3]], "imagenet-train", "uint8 numpy array"),
    (np.zeros((2, 4, 4, 3), np.uint8), "decode,resize(4)", "no output steps"),
    (np.zeros((2, 4, 4, 3), np.uint8), "no-such", 'transform="no-such"'),
])
def test_expand_pixels_refuses_what_does_not_fit(pixels, spec, words):
    with pytest.raises(ValueError, match=words):
        _native._expand_pixels(pixels, spec)
