"""Type stubs of feedline's native module, feedline._native (feeds training
data to deep-learning trainers: zero-copy numpy batches from a Rust
pipeline); the package feedline re-exports every name here."""

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Optional, Union, final

import numpy as np
import numpy.typing as npt

__all__ = ["Loader", "Batch", "Feed", "FeedlineError", "FeedArray", "EpochIterator"]

__version__: str
"""The package's version (the Rust crate's)."""

_DType = Union[str, type, np.dtype[Any], Any]
"""numpy's names ("float32", "float64", "int64", "int32", "uint8", "bool", or
"bytes"), numpy dtypes and types, torch's dtypes (torch.float32) and names
("torch.float32", "double", "long"). The ambiguous "float" and "int" (and
the types float, int) are a ValueError: write float32/float64, int32/int64."""

_Dim = Optional[int]
"""A non-negative extent; None (or -1) as the first dimension: variable length."""

_FieldSpec = Union[
    tuple[_DType, Sequence[_Dim]],
    tuple[_DType, Sequence[_Dim], Literal["offsets", "padded"]],
]
_SchemaSpec = Mapping[str, _FieldSpec]
"""{"x": ("float32", [64]), "y": ("int64", []), "tokens": ("int64", [None], "offsets")}"""

_Value = Union["FeedArray", list[bytes], list[list[bytes]]]

class FeedlineError(Exception):
    """A bad record (its file, `record N` and `offset M` in the message), a
    pipeline failure, a use of a closed or exhausted loader (the message says
    why: "closed", "all 2 passes delivered", ...), or of a loader made in
    another process ("this loader was created in another process; create it
    after fork")."""

class FeedArray(np.ndarray[Any, Any]):
    """A read-only numpy array viewing a batch's Rust buffer (no copy).

    ``__dlpack__`` exports the same memory (DLPack 0.8 for torch.from_dlpack,
    1.0 with the read-only flag when asked), keeping the batch alive.
    """

    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[tuple[int, int]] = None,
        dl_device: Optional[tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[Literal[1], Literal[0]]: ...

@final
class Batch(Mapping[str, _Value]):
    """A batch: field name -> array. Fixed fields: [batch, dims...]; ragged
    fields: values [total, dims...] with offsets(name), or padded
    [batch, max, dims...] with lengths(name); bytes fields: a list of bytes
    per instance (scalar) or a list of lists of bytes."""

    @property
    def pass_(self) -> int:
        """The pass (epoch) of the batch, from 0."""
    @property
    def seq(self) -> int:
        """The batch's number within its pass, from 0."""
    @property
    def size(self) -> int:
        """Instances in the batch."""
    @property
    def padded_rows(self) -> int:
        """Rows at the end of the batch that are padding (equalize="pad":
        repeated instances, or packed rows holding no token)."""
    @property
    def mask(self) -> npt.NDArray[np.bool_]:
        """One flag per row: True for a real instance or packed row, False for padding."""
    @property
    def origins(self) -> list[tuple[str, int]]:
        """(source, record index) of every instance, in batch order."""
    @property
    def segments(self) -> Optional[list[tuple[int, str, int, int, int, int]]]:
        """A packed batch's document pieces (pack=): (row, source, record,
        start, length, doc_tokens), row by row, in order; None when not packed."""
    def __getitem__(self, key: str, /) -> _Value: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[str]: ...
    def __contains__(self, key: object, /) -> bool: ...
    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        """batch[key], or default when there is no such field."""
    def offsets(self, name: str) -> Optional[npt.NDArray[np.int64]]:
        """Ragged field, offsets layout: batch + 1 offsets into batch[name]'s first dimension."""
    def lengths(self, name: str) -> Optional[npt.NDArray[np.int64]]:
        """Ragged field, padded layout: each instance's length along dimension 1."""
    def bytes_buffer(self, name: str) -> tuple[FeedArray, npt.NDArray[np.int64]]:
        """A bytes field without copies: (uint8 data of every string
        concatenated, int64 offsets); string k is data[off[k]:off[k+1]]."""
    def instance_values(self, name: str) -> list[Any]:
        """The field split per instance (views; ragged fields trimmed)."""

@final
class Feed:
    """The producer's side of Loader.with_feed (Paddle's PyArrayFeedQueue)."""

    def push(self, instance: Mapping[str, Any]) -> None:
        """Push one instance; blocks (GIL released) while the pipeline is
        full. A wrong field raises ValueError naming the field, the expected
        and the actual shape and dtype; nothing is pushed then."""
    def push_batch(self, batch: Mapping[str, Any]) -> None:
        """Push a ready-made batch (arrays with one row per instance; ragged
        and bytes fields as lists of per-instance values); not shuffled."""
    def close(self) -> None:
        """End the stream: the loader ends after what was pushed. Idempotent."""
    @property
    def closed(self) -> bool: ...
    def stats(self) -> dict[str, Union[int, float]]:
        """instances, batches, batch_instances, refused, blocked_s."""
    def __enter__(self) -> "Feed": ...
    def __exit__(
        self,
        t: Optional[type[BaseException]] = None,
        v: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> bool: ...

@final
class EpochIterator(Iterator[Batch]):
    """What iter(loader) gives: the batches of the epoch it began (or
    joined); it stops at that epoch's end, in every thread iterating it."""

    def __iter__(self) -> "EpochIterator": ...
    def __next__(self) -> Batch: ...

@final
class Loader(Iterator[Batch]):
    """Batches from files, epoch by epoch: with passes=None (the default)
    each loop (each iter(loader)) runs the next epoch, one pass, prefetched
    across the end of the last; with passes=N one loop runs all N passes and
    a later loop raises FeedlineError. A loop left early (break) goes on when
    iterated again. A context manager; close() (or leaving `with`, or
    dropping it) stops every thread; the interpreter's exit too."""

    def __new__(
        cls,
        files: Union[str, os.PathLike[str], Sequence[Union[str, os.PathLike[str]]]],
        batch_size: int = 256,
        shuffle: int = 10_000,
        seed: int = 0,
        passes: Optional[int] = None,
        readers: Optional[int] = None,
        deterministic: bool = False,
        drop_last: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        on_error: Literal["fail", "skip"] = "fail",
        max_bad: Optional[int] = None,
        schema: Optional[_SchemaSpec] = None,
        capacity: Optional[int] = None,
        map: Optional[Callable[[dict[str, Any], np.random.Generator], Mapping[str, Any]]] = None,
        workers: Optional[int] = None,
        map_schema: Optional[_SchemaSpec] = None,
        resume: Optional[Union[dict[str, Any], Sequence[dict[str, Any]]]] = None,
        transform: Optional[str] = None,
        batches_in_flight: Optional[int] = None,
        equalize: Optional[Literal["drop", "pad"]] = None,
        max_pixels: Optional[int] = None,
        tokenizer: Optional[str] = None,
        text_field: Optional[str] = None,
        add_eos: bool = False,
        add_bos: bool = False,
        pack: Optional[int] = None,
        pack_window: Optional[int] = None,
        pack_policy: Optional[Literal["best-fit", "first-fit", "concat"]] = None,
        long_docs: Optional[Literal["split", "truncate", "drop"]] = None,
        pack_field: Optional[str] = None,
        min_pool: Optional[int] = None,
        shuffle_mode: Optional[Literal["buffer", "global", "block"]] = None,
        index_dir: Optional[str] = None,
        metrics_addr: Optional[str] = None,
        autotune: bool = False,
        cpus: Optional[int] = None,
        memory_budget: Optional[int] = None,
    ) -> "Loader":
        """readers: prefetch reader threads (default 2).
        map: a Python callable (instance dict, rng) -> dict of output fields,
        run on `workers` transform threads with the GIL held (one at a time on
        a GIL build); its exceptions are bad records under `on_error`.
        resume: a state_dict() (or the JSON of a checkpoint(path) file) to go
        on from, or a list of them, one per rank of the old job, for an elastic
        resume under this rank/world_size; settings or inputs that changed
        since are a ValueError naming them.
        transform: a built-in image transform by its CLI name (`--transform SPEC`):
        "decode", "imagenet-train", "imagenet-eval" or a chain such as
        "decode,resize(256),center-crop(224),to-f32,chw", run in Rust on `workers`
        threads (no GIL) on every image field; not with map=.
        batches_in_flight: batches made side by side on the workers at most (made,
        or being made, and not yet taken); default: enough for 16 rows per worker.
        The batches do not depend on it.
        passes: None (the default): epochs by iteration, one pass per loop, as
        many loops as you run; N: one loop runs N passes.
        rank, world_size: neither given, they come from RANK / WORLD_SIZE when
        set (a UserWarning, and a warning on the "feedline" logger, names both
        and the share of the data this loader reads), else 0 / 1.
        equalize: "drop" or "pad": every rank gets the same batches per pass
        (the smallest rank's count, or the largest's by repeating instances).
        max_pixels: with transform=, the most pixels (width x height) an image may
        have (default: PIL's 178956970); a larger one is a bad record naming its
        size, refused before it is decoded. Each worker may hold about 14 bytes
        per pixel of it.
        tokenizer: a Hugging Face tokenizer.json applied to `text_field` (default
        "text") on `workers` threads, giving int32 `input_ids` per document (the
        ids Python's tokenizers gives), with EOS/BOS if add_eos/add_bos.
        pack: L, pack each pass's documents into batches of batch_size rows of L
        tokens (input_ids, segment_ids, position_ids, cu_seqlens, max_seqlen;
        batch.segments the provenance); pack_policy "best-fit" (default),
        "first-fit" or "concat"; pack_window documents in open rows (default
        1000); long_docs "split" (default), "truncate" or "drop" (pack_window
        and long_docs are best-fit's and first-fit's: refused with "concat");
        pack_field the token field (default "input_ids"). stats()["packing"]
        has the fill.
        With equalize=, every rank gets as many packed rows; not with
        drop_last=True.
        min_pool: instances held before the shuffle draws start, at most
        `shuffle` (default: the pool size).
        shuffle_mode: "buffer" (default: a pool of `shuffle` records over
        shuffled files), "global" (each pass an exact permutation of every
        record, read by position through a record index of each file kept
        in `index_dir`; the same batches whatever the readers; checkpoints
        of constant size); "block" (the files in a permuted order, in groups
        of 16, each group cut into blocks of about `shuffle` records holding
        a slice of every file of the group, each block permuted; read by
        position like "global", a block's records of a file with one read).
        metrics_addr: "HOST:PORT": serve Prometheus metrics (OpenMetrics text)
        at http://HOST:PORT/metrics while the loader runs (default: none, no
        port opened); a port in use is a FeedlineError naming the address.
        autotune: tune, while it runs, the transform workers, batches in flight
        and chunks in flight not given (and choose the readers, when not given,
        as it starts) within `cpus` cores of CPU time (a reader or worker is
        added only while the process used less; each pool at most `cpus`
        threads; default: the cores this process may use) and
        `memory_budget` bytes of stated in-flight bound (default: a quarter
        of the memory it may use);
        stats()["autotune"] has the values in force and the changes kept
        (docs/autotune.md). cpus= and memory_budget= need autotune=True.
        A refused setting is a ValueError whose sentence is the one the Rust
        builder and the command give, each setting spelled as its keyword."""
    @staticmethod
    def with_feed(
        schema: _SchemaSpec,
        batch_size: int = 256,
        capacity: int = 4,
        shuffle: int = 0,
        seed: int = 0,
        deterministic: bool = False,
        drop_last: bool = False,
    ) -> tuple["Loader", Feed]:
        """A push-mode loader and its feed."""
    def __iter__(self) -> EpochIterator:  # type: ignore[override]
        """The next epoch (or the rest of the one a loop left early)."""
    def __next__(self) -> Batch:
        """The next batch of the epoch in progress (one is begun if none is)."""
    def __len__(self) -> int:
        """Batches this rank gets in the epoch in progress or next (passes=N: in
        one pass), from every input's record count (headers, or counted by
        framing once per file, in the background); TypeError only for pushed
        data (and a pipe or device input, whose data counting would read away).
        Packing (pack=): the packed batches, where every rank's rows are counted
        at start-up (equalize="drop"/"pad" over world_size > 1); TypeError,
        saying why, without equalize."""
    def set_epoch(self, epoch: int) -> None:
        """The next loop runs epoch `epoch` in the order a fresh loader's pass
        `epoch` has (deterministic mode: the same batches), as
        DistributedSampler.set_epoch; free when it is the epoch the next loop
        runs anyway, else the pipeline starts again at that pass."""
    def state_dict(self) -> dict[str, Any]:
        """The position after the batches taken so far (a JSON-serialisable dict, the
        Rust Checkpoint): Loader(..., resume=state) or load_state_dict(state) goes on
        from exactly there. Also after an end, an error or Ctrl-C (not after close())."""
    def load_state_dict(self, state: Union[dict[str, Any], Sequence[dict[str, Any]]]) -> None:
        """Go on from `state` as resume=state would (torchdata's StatefulDataLoader name):
        the pipeline starts again there; the next loop finishes the epoch it was taken in."""
    def checkpoint(self, path: Union[str, os.PathLike[str]]) -> None:
        """Write state_dict() to `path` as JSON, atomically (the file `feedline run
        --checkpoint` writes; a previous checkpoint there is replaced). Refused, nothing
        written: ValueError for a path that exists and is not a regular file (a device such
        as /dev/null, a FIFO, a directory, through a symbolic link too) or is one of this
        loader's input files; FileNotFoundError for a path in a missing directory (naming
        it); OSError if it cannot be written."""
    def stats(self) -> dict[str, Any]:
        """records, batches, bytes, records_per_s, stages (busy/idle per stage), bottleneck, ...;
        "python": next_calls, next_gil_s, next_gil_us (the mean time one next() held the GIL,
        its waits for a batch excepted)."""
    @property
    def schema(self) -> dict[str, _FieldSpec]: ...
    @property
    def image_fields(self) -> Optional[list[str]]:
        """The fields the built-in image transform (transform=) decodes: None
        without one, or until they are known (found on the first instance
        transformed: those of one JPEG or PNG byte string)."""
    @property
    def rank(self) -> int:
        """The data-parallel rank in force (given, from RANK, or 0)."""
    @property
    def world_size(self) -> int:
        """The data-parallel world size in force (given, from WORLD_SIZE, or 1)."""
    @property
    def closed(self) -> bool:
        """True after close(), the last pass of passes=N, an error or Ctrl-C (and
        in a process other than the one that made it)."""
    def close(self) -> None: ...
    def __enter__(self) -> "Loader": ...
    def __exit__(
        self,
        t: Optional[type[BaseException]] = None,
        v: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> bool: ...

def _pixel_steps(transform: str) -> Optional[str]:
    """The pixel steps of a built-in transform spec (its output left uint8
    [H, W, 3]), or None when it has no output steps (feedline.ray)."""

def _expand_pixels(pixels: npt.NDArray[np.uint8], transform: str) -> FeedArray:
    """The output steps (to-f32, normalize, chw) of `transform` run on the
    uint8 [n, H, W, 3] pixels its pixel steps made (feedline.ray)."""

def _expand_inputs(inputs: list[str]) -> list[str]:
    """`inputs` (paths, URLs, globs, brace ranges, @list files, FORMAT:
    prefixes) as the file specs Loader(files=inputs) reads, with the
    Loader's errors for a mistake (feedline.ray)."""

def _group_plan(
    counts: list[int], seed: int, pass_: int, groups: int, world_size: int, shuffle: bool
) -> tuple[list[list[tuple[list[int], int, int, list[Optional[tuple[int, int]]], int]]], list[int], bool]:
    """One pass's groups for a feedline.ray Service (feedline_actors::group_plan):
    per group its parts (file ids, shard, shards, per-file kept ranges,
    seed), per group its records, and whether the files are shared by
    record (more groups than files)."""
