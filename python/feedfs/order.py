"""feedfs.order — sampler wrappers that hand the loader's order to a feedfs mount.

DESIGN
A shuffling loader's order is fixed before the epoch starts: the sampler
draws it. These wrappers draw the whole epoch from the sampler they wrap,
send the matching paths to the mount (feedfs.send_order: one "O" request on
the mount's control socket, the paths in that order) and then yield exactly
what the wrapped sampler drew, so the training loop sees no difference and
the daemon can fetch the files ahead of the readers.

The sampler runs in the process that iterates the DataLoader (its main
process, whatever num_workers is, persistent workers or not), so one order
is sent per epoch, from there; workers only open files. The paths are
checked and encoded once, at construction; each epoch only joins them. When
no paths are given they are the wrapped sampler's dataset's (its
data_source or dataset: .paths, or .samples as torchvision's ImageFolder
has them), and the mount is the one holding the first of them.

Each iter() returns an epoch iterator that draws and sends at its first
next() (torch's multi-worker DataLoader makes one per epoch that it never
uses). The iterator, and the wrapper for its latest started iterator, have
state_dict()/load_state_dict() (torchdata's Stateful protocol, which
StatefulDataLoader looks for): the state is the rest of the epoch, and a
resumed epoch yields that rest and sends only its paths.

A new order replaces the old one of the same stream. With a distributed
sampler (torch's DistributedSampler, Paddle's DistributedBatchSampler, or a
batch sampler over one) every rank sends the order of its own shard as the
stream "rank<N>", so ranks sharing one node mount each keep their window;
stream= overrides the name (None: the default stream).

Nothing here imports torch or paddle: feedfs.torch.OrderedSampler is
OrderedSampler with torch's Sampler as a base when torch is there (for
isinstance checks); OrderedBatchSampler is the same for both frameworks.
"""
from __future__ import annotations

import operator
import os
import warnings
from typing import (TYPE_CHECKING, Any, Dict, Generic, Iterable, Iterator, List, Optional,
                    Sequence, Sized, TypeVar, Union)

import feedfs
from . import StrPath, Stream

__all__ = ["OrderedSampler", "OrderedBatchSampler", "AUTO"]

Item = TypeVar("Item")


class _Auto:
    """The default stream: "rank<N>" for a distributed sampler, else None."""

    def __repr__(self) -> str:
        return "AUTO"


AUTO = _Auto()
StreamArg = Union[Stream, _Auto]


def _rank_of(sampler: object) -> Optional[int]:
    """The rank a distributed sampler draws for (torch: rank/num_replicas;
    Paddle: local_rank/nranks), looking through one level of batch sampler;
    None for any other sampler."""
    for obj in (sampler, getattr(sampler, "sampler", None),
                getattr(sampler, "batch_sampler", None)):
        if obj is None:
            continue
        for rank, size in (("rank", "num_replicas"), ("local_rank", "nranks")):
            r = getattr(obj, rank, None)
            if isinstance(r, int) and isinstance(getattr(obj, size, None), int):
                return r
    return None


def dataset_paths(sampler: object) -> List[StrPath]:
    """The paths of the dataset a sampler draws from: the first of its
    data_source or dataset (looking through one level of .sampler /
    .batch_sampler) that has .paths (feedfs datasets, FileDataset) or
    .samples [(path, target)] (torchvision ImageFolder/DatasetFolder).
    Raises TypeError when none has."""
    for obj in (sampler, getattr(sampler, "sampler", None),
                getattr(sampler, "batch_sampler", None)):
        if obj is None:
            continue
        for name in ("data_source", "dataset"):
            ds = getattr(obj, name, None)
            if ds is None:
                continue
            paths = getattr(ds, "paths", None)
            if paths is not None:
                return list(paths)
            samples = getattr(ds, "samples", None)
            if samples is not None:
                return [s[0] for s in samples]
    raise TypeError("feedfs: no paths given and the sampler's dataset has neither .paths nor "
                    ".samples (pass paths=[...] and mountpoint=)")


class _Epoch(Iterator[Item]):
    """One epoch of a wrapper: drawn and sent at the first next()."""

    def __init__(self, owner: _Ordered[Item]) -> None:
        self._owner = owner
        self._items: Optional[List[Item]] = None    # the epoch (None: not drawn)
        self._pos = 0                               # how many of them were yielded
        self._started = False

    def __iter__(self) -> _Epoch[Item]:
        return self

    def __next__(self) -> Item:
        if not self._started:
            self._started = True
            owner = self._owner
            owner._live = self
            # A state loaded into the wrapper is for the next epoch that starts:
            # this one, even when it had one of its own (StatefulDataLoader loads
            # the same state into both), so it never outlives this epoch.
            pending, owner._resume = owner._resume, None
            if self._items is None:
                self._items = pending
            if self._items is None:
                self._items = list(owner._inner)
            owner._send(owner._flat(self._items[self._pos:]))
        items = self._items
        assert items is not None
        if self._pos >= len(items):
            self._items, self._pos = [], 0
            raise StopIteration
        self._pos += 1
        return items[self._pos - 1]

    def state_dict(self) -> Dict[str, Any]:
        """{"rest": what this epoch has still to yield, a list; None when it
        has not started or is over (a resume then starts a new epoch)}."""
        if self._items is None or self._pos >= len(self._items):
            return {"rest": None}
        return {"rest": [self._owner._plain(x) for x in self._items[self._pos:]]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Yield state["rest"] (a state_dict() of an iterator of the same
        wrapper's kind) instead of drawing; its paths are sent at the next
        next(). Raises ValueError for a state that is not one."""
        rest = self._owner._check_state(state)
        if rest is not None:
            self._items, self._pos, self._started = rest, 0, False


class _Ordered(Generic[Item]):
    """What both wrappers share: the encoded paths, the send, the state."""

    def __init__(self, inner: Iterable[Item], paths: Optional[Sequence[StrPath]],
                 mountpoint: Optional[StrPath], strict: bool, stream: StreamArg) -> None:
        self._inner = inner
        if paths is None:
            paths = dataset_paths(inner)
        if mountpoint is None:
            first = next((p for p in paths), None)
            if first is None or not os.fsencode(first).startswith(b"/"):
                raise ValueError("feedfs: mountpoint= is needed when the first path is not "
                                 "absolute (got %r)" % (first,))
            mountpoint = feedfs.mount_point(first)
        self.mountpoint: StrPath = mountpoint
        self.strict = strict
        if isinstance(stream, _Auto):
            rank = _rank_of(inner)
            stream = None if rank is None else "rank%d" % rank
        feedfs._stream_bytes(stream)    # a bad name fails here, not at the first epoch
        self.stream: Stream = stream
        self._lines = feedfs.encode_paths(mountpoint, paths)
        self._warned = False
        self._live: Optional[_Epoch[Item]] = None
        self._resume: Optional[List[Item]] = None
        self.sent = 0           # paths the daemon accepted for the last epoch

    # The kind-specific parts: the indices of an item, an item as state keeps it.
    def _flat(self, items: Sequence[Item]) -> List[int]:
        raise NotImplementedError

    def _plain(self, item: Item) -> Any:
        raise NotImplementedError

    def _check_state(self, state: Dict[str, Any]) -> Optional[List[Item]]:
        raise NotImplementedError

    def _send(self, indices: Iterable[int]) -> None:
        lines = self._lines
        try:
            order = [lines[operator.index(i)] for i in indices]
        except IndexError:
            raise IndexError("feedfs: the sampler drew an index past the %d paths given"
                             % len(lines)) from None
        try:
            self.sent = feedfs._send_order_payload(self.mountpoint, order, stream=self.stream)
        except OSError as e:
            self.sent = 0
            if self.strict:
                raise
            if not self._warned:    # once: an unreachable mount should not flood the log
                self._warned = True
                warnings.warn("feedfs: the order was not sent (%s); reading on without it" % e,
                              RuntimeWarning, stacklevel=3)

    def __iter__(self) -> Iterator[Item]:
        # Nothing is drawn or sent until the first item is asked for. torch's
        # multi-worker DataLoader creates (and drops) one sampler iterator
        # more than it uses per epoch; that one costs nothing.
        return _Epoch(self)

    def __len__(self) -> int:
        inner = self._inner
        if not isinstance(inner, Sized):
            raise TypeError("feedfs: the wrapped sampler has no len()")
        return len(inner)

    def set_epoch(self, epoch: int) -> None:
        """Forwarded to the wrapped sampler (DistributedSampler,
        DistributedBatchSampler), whose next draw then follows that epoch."""
        getattr(self._inner, "set_epoch")(epoch)

    def state_dict(self) -> Dict[str, Any]:
        """The state of the latest epoch that started, or of the one that a
        load_state_dict() set for the next: {"rest": [...]} with what it has
        still to yield, or {"rest": None} (no epoch under way: a resume
        draws a new one). The wrapped sampler's own state (its generator)
        is not in it."""
        if self._resume is not None:
            return {"rest": [self._plain(x) for x in self._resume]}
        if self._live is None:
            return {"rest": None}
        return self._live.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """The next epoch that starts yields state["rest"] (from state_dict())
        instead of drawing one, and sends only those items' paths; with
        {"rest": None} it draws as usual. Raises ValueError for a state that
        is not one of this kind of wrapper or holds an index past the paths."""
        self._resume = self._check_state(state)

    if not TYPE_CHECKING:
        def __getattr__(self, name):
            # Attributes of the wrapped sampler (num_samples, epoch, batch_size...)
            # read through; only called for names this object lacks. Hidden from
            # type checkers, which should see the wrapper's own API only.
            inner = self.__dict__.get("_inner")
            if inner is None:
                raise AttributeError(name)
            return getattr(inner, name)


def _state_rest(state: Dict[str, Any]) -> Optional[List[Any]]:
    if not isinstance(state, dict) or "rest" not in state:
        raise ValueError("feedfs: not a sampler state (want {'rest': [...] or None}): %r"
                         % (state,))
    rest = state["rest"]
    if rest is not None and not isinstance(rest, list):
        raise ValueError("feedfs: sampler state 'rest' must be a list or None, not %s"
                         % type(rest).__name__)
    return rest


class OrderedSampler(_Ordered[int]):
    """Wrap a sampler of dataset indices so that each epoch's order reaches
    the feedfs mount before the first file is opened.

    sampler: any torch sampler (RandomSampler, DistributedSampler, ...) or any
    iterable of indices, finite per epoch. paths: paths[i] is the file the
    dataset opens for index i, absolute under the mount or relative to its
    root (for torchvision's ImageFolder: [p for p, _ in ds.samples]); None
    (default): the .paths or .samples of the sampler's data_source or
    dataset (feedfs.torch.FolderDataset, ListDataset, ImageFolder), and a
    TypeError when it has neither. mountpoint: the mount point or a path
    inside the mount; None (default): the mount holding paths[0], which must
    then be absolute (ValueError), on a feedfs mount (OSError ENOENT).

    Each iteration, at its first next() (so before the first file is
    opened, and not for an iterator that is dropped unused, as torch's
    multi-worker DataLoader does with one per epoch), draws the epoch:
    list(sampler); sends, on one new connection to the mount's control
    socket, "O <count> <nbytes>\\n" and the drawn indices' paths,
    mount-relative, one per line, in the drawn order; and then yields those
    same indices. Nothing is sent at construction (the paths are only
    checked: ValueError for a path the daemon would refuse) nor while the
    indices are consumed.

    stream: the order's stream name; by default "rank<N>" for a distributed
    sampler (its rank) and the default stream otherwise (None). The header
    is then "O <count> <nbytes> <stream>\\n". A bad name is a ValueError here.

    strict=False (default): when the order cannot be sent (daemon unreachable,
    "ERR <errno>"), warn once and yield the indices anyway, since the order
    only makes reading faster; strict=True raises the OSError instead.
    len() is the wrapped sampler's; set_epoch() is forwarded to it.
    state_dict()/load_state_dict(): resume mid-epoch (module docstring)."""

    def __init__(self, sampler: Iterable[int], paths: Optional[Sequence[StrPath]] = None,
                 mountpoint: Optional[StrPath] = None, strict: bool = False,
                 stream: StreamArg = AUTO) -> None:
        super().__init__(sampler, paths, mountpoint, strict, stream)
        self.sampler = sampler

    def _flat(self, items: Sequence[int]) -> List[int]:
        return list(items)

    def _plain(self, item: int) -> int:
        return operator.index(item)

    def _check_state(self, state: Dict[str, Any]) -> Optional[List[int]]:
        rest = _state_rest(state)
        if rest is None:
            return None
        n = len(self._lines)
        if not all(isinstance(i, int) and 0 <= i < n for i in rest):
            raise ValueError("feedfs: sampler state holds an index that is not one of the %d "
                             "paths" % n)
        return list(rest)


class OrderedBatchSampler(_Ordered[List[int]]):
    """The same for a batch sampler (Paddle's BatchSampler or
    DistributedBatchSampler, torch's BatchSampler): it yields batches.

    Each iteration, at its first next(), draws every batch of the epoch from
    batch_sampler; sends "O <count> <nbytes>\\n" and the paths of the
    batches' indices, flattened in batch order, one per line; and then yields
    the same batches (the wrapped sampler's own objects; after a
    load_state_dict(), lists). Pass it as batch_sampler= to the DataLoader.
    paths, mountpoint, strict and stream are as for OrderedSampler (paths
    found through batch_sampler.sampler's data_source, or its dataset;
    stream from Paddle's DistributedBatchSampler: its local_rank); len() and
    set_epoch() are the wrapped sampler's. paddle is never imported."""

    def __init__(self, batch_sampler: Iterable[List[int]],
                 paths: Optional[Sequence[StrPath]] = None,
                 mountpoint: Optional[StrPath] = None, strict: bool = False,
                 stream: StreamArg = AUTO) -> None:
        super().__init__(batch_sampler, paths, mountpoint, strict, stream)
        self.batch_sampler = batch_sampler

    def _flat(self, items: Sequence[List[int]]) -> List[int]:
        return [i for b in items for i in b]

    def _plain(self, item: List[int]) -> List[int]:
        return [operator.index(i) for i in item]

    def _check_state(self, state: Dict[str, Any]) -> Optional[List[List[int]]]:
        rest = _state_rest(state)
        if rest is None:
            return None
        n = len(self._lines)
        if not all(isinstance(b, list) and all(isinstance(i, int) and 0 <= i < n for i in b)
                   for b in rest):
            raise ValueError("feedfs: batch sampler state holds a batch that is not a list of "
                             "indices of the %d paths" % n)
        return [list(b) for b in rest]
