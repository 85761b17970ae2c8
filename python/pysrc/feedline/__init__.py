"""feedline: training data fed to deep-learning trainers at the speed of the
devices -- zero-copy numpy batches from a Rust pipeline.

    import feedline
    loader = feedline.Loader(files=["data/train-*.tfrecord"], batch_size=256, seed=7)
    for epoch in range(3):
        for batch in loader:          # one epoch (pass) per loop
            ...

The Loader, Batch, Feed and FeedArray classes live in the native module
``feedline._native``; ``feedline.torch`` (a DataLoader-shaped adapter and an
IterableDataset) and ``feedline.jax`` (an iterator of jax.Array batches) and ``feedline.ray``
(feedline's pipelines in Ray actors feeding trainer ranks, and a Ray Data
source) are imported on first use and import torch, JAX or Ray themselves:
the package needs none of them. The library's log records go to Python's ``logging``, under the
logger ``"feedline"``.
"""

from feedline._native import (
    Batch,
    EpochIterator,
    Feed,
    FeedArray,
    FeedlineError,
    Loader,
    __version__,
)

__all__ = ["Loader", "Batch", "Feed", "FeedlineError", "FeedArray", "EpochIterator", "torch", "jax", "ray"]


def __getattr__(name):
    # feedline.torch / feedline.jax / feedline.ray on first use (PEP 562):
    # `import feedline` never imports torch, JAX or Ray.
    if name in ("torch", "jax", "ray"):
        import importlib

        return importlib.import_module(f"feedline.{name}")
    raise AttributeError(f"module 'feedline' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + ["torch", "jax", "ray"])
