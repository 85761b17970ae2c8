"""Shared by the test files: the process's thread count and generated .npz data."""

import os

import numpy as np


def threads():
    return len(os.listdir("/proc/self/task"))


def make_npz(tmp_path, files=4, rows=50):
    """files × rows instances; y is a global id 0..files*rows, x = [id]*4."""
    paths = []
    for f in range(files):
        ids = np.arange(f * rows, (f + 1) * rows, dtype=np.int64)
        x = np.repeat(ids.astype(np.float32)[:, None], 4, axis=1)
        p = tmp_path / f"part{f}.npz"
        np.savez(p, x=x, y=ids)
        paths.append(str(p))
    return paths
