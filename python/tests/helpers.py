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


# ------------------------------------------------------------------ TFRecord

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, payload):
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def example(y, x=None):
    """A tf.train.Example {y: int64_list[y], x: float_list[x...]} (protobuf by hand)."""
    feats = [(b"y", _field(3, _field(1, _varint(y))))]
    if x is not None:
        import struct
        feats.append((b"x", _field(2, _field(1, struct.pack(f"<{len(x)}f", *x)))))
    body = b"".join(_field(1, _field(1, k) + _field(2, v)) for k, v in feats)
    return _field(1, body)


def write_tfrecord(path, ys):
    """A TFRecord file of one Example per label in `ys` (x = [y, y])."""
    import struct
    with open(path, "wb") as f:
        for y in ys:
            data = example(int(y), [float(y), float(y)])
            n = struct.pack("<Q", len(data))
            f.write(n + struct.pack("<I", _masked(n)) + data + struct.pack("<I", _masked(data)))
    return str(path)


def write_tar(path, ys):
    """A WebDataset tar: sample NNNNNN with NNNNNN.cls (the label) and NNNNNN.bin."""
    import io
    import tarfile
    with tarfile.open(path, "w") as t:
        for y in ys:
            for ext, data in (("cls", str(int(y)).encode()), ("bin", bytes([int(y) % 256]) * 3)):
                info = tarfile.TarInfo(f"{int(y):06d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return str(path)
