"""Shared by the test files: the process's thread count and generated .npz data."""

import os
import time

import numpy as np


def threads():
    return len(os.listdir("/proc/self/task"))


def threads_back_to(before, deadline_s=30.0):
    """True once the process has no more threads than `before` (polled: a
    thread that was joined may still be listed in /proc for a moment);
    False if it still has more after `deadline_s` (a thread left behind)."""
    end = time.monotonic() + deadline_s
    while threads() > before:
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return threads() == before


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
