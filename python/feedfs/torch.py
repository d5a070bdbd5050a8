"""feedfs.torch — samplers that hand the loader's order to a feedfs mount.

DESIGN
A shuffling loader's order is fixed before the epoch starts: the sampler
draws it. These wrappers draw the whole epoch from the sampler they wrap,
send the matching paths to the mount (feedfs.send_order: one "O" request on
the mount's control socket, the paths in that order) and then yield exactly
what the wrapped sampler drew, so the training loop sees no difference and
the daemon can fetch the files ahead of the readers.

The sampler runs in the process that iterates the DataLoader (its main
process, whatever num_workers is), so one order is sent per epoch, from
there; workers only open files. The paths are checked and encoded once, at
construction; each epoch only joins them.

A new order replaces the old one of the same stream. With a distributed
sampler (torch's DistributedSampler, Paddle's DistributedBatchSampler, or a
batch sampler over one) every rank sends the order of its own shard as the
stream "rank<N>", so ranks sharing one node mount each keep their window;
stream= overrides the name (None: the default stream).

torch is not needed: OrderedSampler derives from torch.utils.data.Sampler
when torch can be imported (so isinstance checks pass) and from object
otherwise; OrderedBatchSampler never imports paddle.
"""
import operator
import warnings

import feedfs

try:
    from torch.utils.data import Sampler as _Base
except Exception:  # noqa: BLE001 - no torch (or a broken one): any iterable works
    _Base = object

__all__ = ["OrderedSampler", "OrderedBatchSampler"]


_AUTO = object()


def _rank_of(sampler):
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


class _Ordered(_Base):
    """What both wrappers share: the encoded paths, the send, delegation."""

    def __init__(self, inner, paths, mountpoint, strict, stream):
        self._inner = inner
        self.mountpoint = mountpoint
        self.strict = strict
        if stream is _AUTO:
            rank = _rank_of(inner)
            stream = None if rank is None else "rank%d" % rank
        feedfs._stream_bytes(stream)    # a bad name fails here, not at the first epoch
        self.stream = stream
        self._lines = feedfs.encode_paths(mountpoint, paths)
        self._warned = False
        self.sent = 0           # paths the daemon accepted for the last epoch

    def _send(self, indices):
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

    def __len__(self):
        return len(self._inner)

    def set_epoch(self, epoch):
        """Forwarded to the wrapped sampler (DistributedSampler,
        DistributedBatchSampler), whose next draw then follows that epoch."""
        self._inner.set_epoch(epoch)

    def __getattr__(self, name):
        # Attributes of the wrapped sampler (num_samples, epoch, batch_size...)
        # read through; only called for names this object lacks.
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)


class OrderedSampler(_Ordered):
    """Wrap a sampler of dataset indices so that each epoch's order reaches
    the feedfs mount before the first file is opened.

    sampler: any torch sampler (RandomSampler, DistributedSampler, ...) or any
    iterable of indices, finite per epoch. paths: paths[i] is the file the
    dataset opens for index i, absolute under the mount or relative to its
    root (for torchvision's ImageFolder: [p for p, _ in ds.samples]).
    mountpoint: the mount point or a path inside the mount.

    Each iteration, at its first next() (so before the first file is
    opened, and not for an iterator that is dropped unused, as torch's
    multi-worker DataLoader does with one per epoch), draws the epoch:
    list(sampler); sends, on one new connection to the mount's control
    socket, "O <count> <nbytes>\\n" and the drawn indices' paths,
    mount-relative, one per line, in the drawn order; and then yields those
    same indices. Nothing is sent at
    construction (the paths are only checked: ValueError for a path the
    daemon would refuse) nor while the indices are consumed.

    stream: the order's stream name; by default "rank<N>" for a distributed
    sampler (its rank) and the default stream otherwise (None). The header
    is then "O <count> <nbytes> <stream>\\n". A bad name is a ValueError here.

    strict=False (default): when the order cannot be sent (daemon unreachable,
    "ERR <errno>"), warn once and yield the indices anyway, since the order
    only makes reading faster; strict=True raises the OSError instead.
    len() is the wrapped sampler's; set_epoch() is forwarded to it."""

    def __init__(self, sampler, paths, mountpoint, strict=False, stream=_AUTO):
        super().__init__(sampler, paths, mountpoint, strict, stream)
        self.sampler = sampler

    def __iter__(self):
        # A generator: nothing is drawn or sent until the first index is
        # asked for. torch's multi-worker DataLoader creates (and drops) one
        # sampler iterator more than it uses per epoch; that one costs nothing.
        indices = list(self._inner)
        self._send(indices)
        yield from indices


class OrderedBatchSampler(_Ordered):
    """The same for a batch sampler (Paddle's BatchSampler or
    DistributedBatchSampler, torch's BatchSampler): it yields batches.

    Each iteration, at its first next(), draws every batch of the epoch from
    batch_sampler; sends "O <count> <nbytes>\\n" and the paths of the
    batches' indices, flattened in batch order, one per line; and then yields
    the same batches (the wrapped sampler's own objects). Pass it as
    batch_sampler= to the DataLoader. paths, mountpoint and strict are as for
    OrderedSampler, and so is stream (Paddle's DistributedBatchSampler: its
    local_rank); len() and set_epoch() are the wrapped sampler's. paddle is
    never imported."""

    def __init__(self, batch_sampler, paths, mountpoint, strict=False, stream=_AUTO):
        super().__init__(batch_sampler, paths, mountpoint, strict, stream)
        self.batch_sampler = batch_sampler

    def __iter__(self):
        # A generator, as OrderedSampler's: drawn and sent at the first next().
        batches = list(self._inner)
        self._send([i for b in batches for i in b])
        yield from batches
