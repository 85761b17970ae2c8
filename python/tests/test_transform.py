"""The built-in image transforms by name from Python: Loader(...,
transform=SPEC, workers=N) takes the CLI's `--transform SPEC` strings.

The images are textured (every pixel differs from its neighbours), so a
crop, a resize and a flip each show in the output: PNGs written here by a
few lines of zlib (lossless, so decoded pixels are checked exactly, with
no Pillow), and JPEGs made with Pillow for the tests that need them (only
those are skipped without it). Bad specs and settings are ValueErrors;
max_pixels= refuses a larger image naming its size."""

import io
import struct
import tarfile
import zlib

import numpy as np
import pytest

import feedline

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def texture(h, w, i):
    """A u8 [h, w, 3] image whose every pixel differs from its neighbours.

    Mutation (tried): a solid colour here (xx = yy = 0) fails
    test_crops_and_flips_show, test_random_resized_crop_... and
    test_imagenet_train_preset: crops and flips are seen."""
    yy, xx = np.mgrid[0:h, 0:w]
    return np.stack([(xx * 7 + i * 11) % 256, (yy * 5 + xx * 3) % 256,
                     (xx * yy + 3 * i + yy) % 256], axis=-1).astype(np.uint8)


def png_bytes(rgb):
    """An 8-bit RGB PNG of `rgb` (u8 [h, w, 3]), no Pillow needed."""
    h, w, _ = rgb.shape

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))

    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def write_tar(path, members):
    with tarfile.open(path, "w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return str(path)


def make_png_tar(tmp_path, n=11, size=None):
    """n textured PNGs (of different sizes unless `size` = (h, w)), label i;
    returns the tar and the images by label."""
    images = {}
    members = []
    for i in range(n):
        h, w = size or (30 + 5 * i, 40 + 7 * i)
        images[i] = texture(h, w, i)
        members += [(f"{i:06d}.png", png_bytes(images[i])), (f"{i:06d}.cls", str(i).encode())]
    return write_tar(tmp_path / "images.tar", members), images


def read_all(tar, **kwargs):
    """label -> output image, over one pass."""
    out = {}
    with feedline.Loader(files=[tar], rank=0, world_size=1, **kwargs) as loader:
        for b in loader:
            for k, label in enumerate(b["cls"].tolist()):
                assert label not in out
                out[label] = np.array(b["png"][k])
    return out


@pytest.mark.parametrize("workers", [1, 2])
def test_decode_gives_every_pixel(tmp_path, workers):
    tar, images = make_png_tar(tmp_path, size=(30, 40))
    got = read_all(tar, batch_size=4, shuffle=5, seed=workers, transform="decode",
                   workers=workers)
    assert sorted(got) == list(range(11))
    for label, img in got.items():
        assert img.dtype == np.uint8 and np.array_equal(img, images[label]), label


def center_offsets(h, w, ch, cw):
    # torchvision's center_crop: int(round((size - crop) / 2.0))
    return int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))


def test_crops_and_flips_show(tmp_path):
    tar, images = make_png_tar(tmp_path)
    # A centre crop is the centred window, exactly.
    got = read_all(tar, batch_size=3, shuffle=0, transform="decode,center-crop(20x24)", workers=2)
    for label, img in got.items():
        h, w, _ = images[label].shape
        top, left = center_offsets(h, w, 20, 24)
        assert np.array_equal(img, images[label][top:top + 20, left:left + 24]), label
    # flip(1) mirrors every image, flip(0) none, flip(0.5) some: each
    # output is the image or its mirror, and both happen.
    flipped = read_all(tar, batch_size=3, shuffle=0, transform="decode,center-crop(20x24),flip(1)")
    for label, img in flipped.items():
        assert np.array_equal(img, got[label][:, ::-1]), label
    kept = read_all(tar, batch_size=3, shuffle=0, transform="decode,center-crop(20x24),flip(0)")
    assert all(np.array_equal(kept[k], got[k]) for k in got)
    some = read_all(tar, batch_size=3, shuffle=0, seed=5, transform="decode,center-crop(20x24),flip")
    mirrored = [np.array_equal(some[k], got[k][:, ::-1]) for k in got]
    assert all(m or np.array_equal(some[k], got[k]) for k, m in zip(got, mirrored))
    assert 0 < sum(mirrored) < len(mirrored), mirrored


def test_random_resized_crop_depends_on_the_seed_and_not_on_workers(tmp_path):
    tar, images = make_png_tar(tmp_path)
    spec = "decode,random-resized-crop(12x16,scale=0.2:0.5),to-f32,chw"
    a = read_all(tar, batch_size=4, shuffle=0, seed=1, transform=spec, workers=1)
    b = read_all(tar, batch_size=4, shuffle=0, seed=1, transform=spec, workers=3)
    c = read_all(tar, batch_size=4, shuffle=0, seed=2, transform=spec, workers=1)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    # Another seed draws other crops: on textured images the pixels differ.
    assert sum(not np.array_equal(a[k], c[k]) for k in a) >= 9
    for k, x in a.items():
        assert x.shape == (3, 12, 16) and x.std() > 0.05, k


def test_imagenet_train_preset(tmp_path):
    tar, images = make_png_tar(tmp_path)
    got = read_all(tar, batch_size=3, shuffle=0, seed=7, transform="imagenet-train", workers=2)
    assert sorted(got) == list(range(11))
    for label, x in got.items():
        assert x.dtype == np.float32 and x.shape == (3, 224, 224)
        # Normalised u8 values: un-normalised, each is an integer 0..255
        # (the ImageNet mean and std in force are these).
        v = (x * STD[:, None, None] + MEAN[:, None, None]) * 255
        assert np.abs(v - np.round(v)).max() < 2e-3, label
        assert v.min() > -0.01 and v.max() < 255.01
        # The texture shows (a solid colour would give one value).
        assert len(np.unique(np.round(v[0]))) > 20, label


def test_resize_equals_pils(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    img = texture(45, 61, 3)
    with_pil = np.asarray(Image.fromarray(img).resize((20, 16), Image.BILINEAR))
    tar = write_tar(tmp_path / "one.tar", [("0.png", png_bytes(img)), ("0.cls", b"0")])
    got = read_all(tar, batch_size=1, shuffle=0, transform="decode,resize(16x20)")
    assert np.array_equal(got[0], with_pil)


def test_max_pixels_refuses_a_larger_image_naming_its_size(tmp_path):
    tar, images = make_png_tar(tmp_path, n=3, size=(30, 40))
    with pytest.raises(feedline.FeedlineError) as e:
        read_all(tar, batch_size=2, shuffle=0, transform="decode", max_pixels=1199)
    for words in ["40x30 pixels (1200)", "pixel limit of 1199", "transform `decode`",
                  "step `decode`", "png"]:
        assert words in str(e.value), str(e.value)
    # One pixel more and every image passes.
    assert len(read_all(tar, batch_size=2, shuffle=0, transform="decode", max_pixels=1200)) == 3
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=[tar], batch_size=2, max_pixels=10, rank=0, world_size=1)
    assert "max_pixels=10 applies only with transform" in str(e.value)


def make_tar(tmp_path, n=2):
    """n textured PNGs, for the settings tests."""
    return make_png_tar(tmp_path, n=n)[0]


@pytest.mark.parametrize("kwargs, words", [
    ({"transform": "decode,spin(3)"}, ["transform=", "spin"]),
    ({"transform": "decode", "map": lambda inst, rng: inst}, ["give map or transform, not both"]),
    ({"transform": "decode", "map_schema": {"x": ("float32", [1])}}, ["map_schema"]),
    ({"workers": 2}, ["workers", "transform"]),
])
def test_bad_transform_settings_are_value_errors(tmp_path, kwargs, words):
    tar = make_tar(tmp_path, n=2)
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=[tar], batch_size=2, rank=0, world_size=1, **kwargs)
    for w in words:
        assert w in str(e.value), str(e.value)


def make_textured_tar(tmp_path, n=30):
    """n JPEGs of different sizes with texture (crops and flips show); made
    with Pillow (the test using it is skipped without)."""
    Image = pytest.importorskip("PIL.Image")
    p = tmp_path / "textured.tar"
    with tarfile.open(p, "w") as t:
        for i in range(n):
            h, w = 30 + 3 * (i % 7), 40 + 5 * (i % 5)
            yy, xx = np.mgrid[0:h, 0:w]
            rgb = np.stack([(xx * 7 + i * 11) % 256, (yy * 5 + xx) % 256,
                            (xx * yy + 3 * i) % 256], axis=-1).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(rgb).save(buf, "JPEG", quality=92)
            for ext, data in (("jpg", buf.getvalue()), ("cls", str(i).encode())):
                info = tarfile.TarInfo(f"{i:06d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return str(p)


def test_batches_in_flight_and_workers_do_not_change_deterministic_batches(tmp_path):
    tar = make_textured_tar(tmp_path)

    def run(workers, in_flight):
        with feedline.Loader(files=[tar], batch_size=4, shuffle=10, seed=3, passes=2,
                             deterministic=True, transform="decode,rrc(12),flip,to-f32,chw",
                             workers=workers, batches_in_flight=in_flight,
                             rank=0, world_size=1) as loader:
            return [(b["cls"].tolist(), b["jpg"].tobytes()) for b in loader]

    want = run(1, 1)
    assert sorted(c for cls, _ in want[:8] for c in cls) == list(range(30))
    for workers, in_flight in [(3, 2), (4, 9)]:
        assert run(workers, in_flight) == want, (workers, in_flight)
    with pytest.raises(ValueError) as e:
        feedline.Loader(files=[tar], batch_size=4, transform="decode", batches_in_flight=0,
                        rank=0, world_size=1)
    assert "batches_in_flight" in str(e.value)
