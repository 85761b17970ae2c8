"""feedline for JAX: batches as ``jax.Array``s. JAX is imported when this is
used (``import feedline`` never imports it).

    import jax, feedline, feedline.jax
    loader = feedline.Loader(files="data/train-*.tfrecord", batch_size=256, seed=7)

    @jax.jit
    def step(params, x, y):
        ...

    for epoch in range(3):
        for batch in feedline.jax.iterator(loader):     # one epoch per loop
            params = step(params, batch["x"], batch["y"])

On the CPU each array views the batch's buffer (DLPack, no copy: every
numeric field starts on a 64-byte boundary, as XLA asks; int64 fields stay
int64 only with ``jax_enable_x64`` on, else JAX converts them, a copy).
With ``sharding=`` (a ``jax.sharding.Sharding``, or a device) each batch is
put there with ``jax.device_put``. Bytes fields stay lists of bytes.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

__all__ = ["iterator"]


def iterator(loader, sharding: Optional[Any] = None) -> Iterator[dict]:
    """The next epoch of `loader` (a ``feedline.Loader``: one loop, one
    epoch) as dicts of ``jax.Array``; `sharding`: where to put each batch
    (``jax.device_put(batch, sharding)``)."""
    import jax
    import jax.dlpack

    from_dlpack = jax.dlpack.from_dlpack

    def arrays(batch, _batch):
        # Each numeric field through its FeedArray's __dlpack__ (JAX takes
        # objects that have one, not bare capsules); bytes fields as they are.
        out = {}
        for name in batch:
            v = batch[name]
            out[name] = from_dlpack(v) if hasattr(v, "__dlpack__") else v
        return out

    if sharding is None:
        return loader._epoch(post=arrays)

    def put(batch, _batch):
        out = arrays(batch, _batch)
        numeric = {k: v for k, v in out.items() if isinstance(v, jax.Array)}
        placed = jax.device_put(numeric, sharding)
        return {k: placed.get(k, v) for k, v in out.items()}

    return loader._epoch(post=put)
