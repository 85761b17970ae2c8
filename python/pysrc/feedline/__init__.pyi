"""The package feedline: the native module's classes (feedline._native),
and feedline.torch / feedline.jax / feedline.ray on first use."""

from types import ModuleType

from feedline._native import (
    Batch as Batch,
    EpochIterator as EpochIterator,
    Feed as Feed,
    FeedArray as FeedArray,
    FeedlineError as FeedlineError,
    Loader as Loader,
    __version__ as __version__,
)

__all__ = ["Loader", "Batch", "Feed", "FeedlineError", "FeedArray", "EpochIterator", "torch", "jax", "ray"]

torch: ModuleType
jax: ModuleType
ray: ModuleType
