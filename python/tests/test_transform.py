"""The built-in image transforms by name from Python: Loader(...,
transform=SPEC, workers=N) takes the CLI's `--transform SPEC` strings.
Tested on solid-colour JPEGs made with PIL (skipped without it) in a
WebDataset tar: every image decoded and resized / augmented to the
spec's shape, its colour kept, once each; bad specs are ValueErrors."""

import io
import tarfile

import numpy as np
import pytest

import feedline

Image = pytest.importorskip("PIL.Image")

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def colour(i):
    return (17 * i % 256, 100, 250 - 9 * i)


def make_tar(tmp_path, n=11):
    """n solid-colour JPEGs of different sizes, label (cls) i."""
    p = tmp_path / "images.tar"
    with tarfile.open(p, "w") as t:
        for i in range(n):
            buf = io.BytesIO()
            Image.new("RGB", (40 + 7 * i, 30 + 5 * i), colour(i)).save(buf, "JPEG", quality=95)
            for ext, data in (("jpg", buf.getvalue()), ("cls", str(i).encode())):
                info = tarfile.TarInfo(f"{i:06d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return str(p)


@pytest.mark.parametrize("workers", [1, 2])
def test_decode_and_resize_by_name(tmp_path, workers):
    tar = make_tar(tmp_path)
    with feedline.Loader(files=[tar], batch_size=4, shuffle=5, seed=workers,
                         transform="decode,resize(16x20)", workers=workers,
                         rank=0, world_size=1) as loader:
        labels = []
        for b in loader:
            img = b["jpg"]
            assert img.dtype == np.uint8 and img.shape == (b.size, 16, 20, 3)
            for k, label in enumerate(b["cls"].tolist()):
                # A solid colour stays that colour (JPEG rounding aside).
                assert np.abs(img[k].astype(int) - colour(label)).max() <= 4, label
            labels.extend(b["cls"].tolist())
        assert loader.schema["jpg"] == ("uint8", [16, 20, 3])
    assert sorted(labels) == list(range(11))


def test_imagenet_train_preset(tmp_path):
    tar = make_tar(tmp_path)
    with feedline.Loader(files=[tar], batch_size=3, shuffle=0, seed=7,
                         transform="imagenet-train", workers=2, rank=0, world_size=1) as loader:
        labels = []
        for b in loader:
            x = b["jpg"]
            assert x.dtype == np.float32 and x.shape == (b.size, 3, 224, 224)
            assert x.ctypes.data % 64 == 0
            for k, label in enumerate(b["cls"].tolist()):
                want = (np.array(colour(label), np.float32) / 255 - MEAN) / STD
                got = x[k].reshape(3, -1)
                assert np.abs(got - want[:, None]).max() < 0.1, label
            labels.extend(b["cls"].tolist())
    assert sorted(labels) == list(range(11))


@pytest.mark.parametrize("kwargs, words", [
    ({"transform": "decode,spin(3)"}, ["transform=", "spin"]),
    ({"transform": "decode", "map": lambda inst, rng: inst}, ["map=", "not both"]),
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
    """n JPEGs of different sizes with texture (crops and flips show)."""
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
