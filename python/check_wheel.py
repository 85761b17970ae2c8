"""A short run of an installed wheel (python/check-wheel.sh): batches from
generated .npz files, every instance once, and a JPEG (the path given)
decoded by the extension's libjpeg-turbo through transform="decode",
checked against the pixels PIL gives (the .npy beside it)."""

import io
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

import feedline


def main(jpeg):
    assert "site-packages" in feedline.__file__, feedline.__file__
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = []
        for f in range(3):
            y = np.arange(f * 100, (f + 1) * 100, dtype=np.int64)
            x = np.repeat(y.astype(np.float32)[:, None], 8, axis=1)
            np.savez(tmp / f"part{f}.npz", x=x, y=y)
            files.append(str(tmp / f"part{f}.npz"))
        seen = []
        with feedline.Loader(files=files, batch_size=32, shuffle=64, seed=1, passes=2) as loader:
            for batch in loader:
                x, y = batch["x"], batch["y"]
                assert x.dtype == np.float32 and x.shape == (batch.size, 8)
                assert (x[:, 0] == y).all()
                seen.extend((batch.pass_, int(v)) for v in y)
        assert sorted(seen) == [(p, v) for p in range(2) for v in range(300)], "each once per pass"

        data = Path(jpeg).read_bytes()
        with tarfile.open(tmp / "images.tar", "w") as t:
            for ext, payload in (("jpg", data), ("cls", b"3")):
                info = tarfile.TarInfo(f"000000.{ext}")
                info.size = len(payload)
                t.addfile(info, io.BytesIO(payload))
        with feedline.Loader(files=[str(tmp / "images.tar")], batch_size=1, shuffle=0,
                             transform="decode", rank=0, world_size=1) as loader:
            (batch,) = list(loader)
        img = batch["jpg"][0]
        want = np.load(jpeg + ".npy")
        assert img.shape == want.shape, (img.shape, want.shape)
        diff = np.abs(img.astype(int) - want.astype(int)).max()
        assert diff <= 2, f"decoded JPEG differs from PIL's by {diff}"
    print(f"check_wheel.py: feedline {feedline.__version__} from {feedline.__file__}: "
          f"600 instances in 2 passes, each once; a {img.shape} JPEG decoded (max |diff| vs PIL {diff})")


if __name__ == "__main__":
    main(sys.argv[1])
