"""feedfs.torch: the sampler wrappers yield exactly what they wrap and send
each epoch's order, in that order, before the first index is used."""
import errno
import os
import random
import warnings

import pytest

import feedfs
import feedfs.torch as ft

try:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, RandomSampler
except Exception:  # noqa: BLE001
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (Debian: python3-torch); "
                                 "the plain-iterable cases cover the same code")


def payload_of(req):
    head, _, body = req.partition(b"\n")
    n, nbytes = (int(x) for x in head.split()[1:3])
    assert len(body) == nbytes
    lines = body.split(b"\n")
    assert lines[-1] == b""
    assert len(lines) - 1 == n
    return [x.decode() for x in lines[:-1]]


class EpochShuffle:
    """A plain sampler: a seeded shuffle of range(n) per epoch, set_epoch like
    DistributedSampler's."""

    def __init__(self, n, seed=7):
        self.n, self.seed, self.epoch = n, seed, 0

    def __iter__(self):
        ix = list(range(self.n))
        random.Random(self.seed * 1000 + self.epoch).shuffle(ix)
        return iter(ix)

    def __len__(self):
        return self.n

    def set_epoch(self, e):
        self.epoch = e


def test_plain_iterable_yields_and_sends_each_epoch(fake_mount):
    mnt, ctl = fake_mount
    paths = [os.path.join(mnt, "c%d" % (i % 3), "img_%03d.jpg" % i) for i in range(50)]
    inner = EpochShuffle(50)
    s = ft.OrderedSampler(inner, paths, mnt)
    assert ctl.orders() == []               # nothing sent at construction
    assert len(s) == 50
    for epoch in range(3):
        s.set_epoch(epoch)
        got = list(s)
        inner2 = EpochShuffle(50)
        inner2.set_epoch(epoch)
        want = list(inner2)
        assert got == want
        assert s.sent == 50
        assert payload_of(ctl.orders()[epoch]) == ["c%d/img_%03d.jpg" % (i % 3, i) for i in want]
    assert len(ctl.orders()) == 3
    # epochs differ (set_epoch reached the wrapped sampler)
    assert ctl.orders()[0] != ctl.orders()[1]
    assert s.epoch == 2                     # attributes read through


def test_order_sent_before_the_first_index(fake_mount):
    mnt, ctl = fake_mount
    s = ft.OrderedSampler([2, 0, 1], ["a", "b", "c"], mnt)
    it = iter(s)
    iter(s)                                 # dropped unused (torch's DataLoader does)
    assert ctl.orders() == []
    assert next(it) == 2
    assert ctl.orders() == [b"O 3 6\nc\na\nb\n"]
    assert list(it) == [0, 1]
    assert len(ctl.orders()) == 1


def test_repeated_indices_and_relative_paths(fake_mount):
    mnt, ctl = fake_mount
    s = ft.OrderedSampler([1, 1, 0], ["x/0", "x/1"], mnt)
    assert list(s) == [1, 1, 0]
    assert ctl.orders() == [b"O 3 12\nx/1\nx/1\nx/0\n"]


def test_bad_path_refused_at_construction(fake_mount):
    mnt, ctl = fake_mount
    with pytest.raises(ValueError, match="'..'"):
        ft.OrderedSampler(range(2), ["ok", "../escape"], mnt)
    assert ctl.orders() == []


def test_index_out_of_range(fake_mount):
    mnt, _ = fake_mount
    s = ft.OrderedSampler([0, 5], ["a", "b"], mnt)
    with pytest.raises(IndexError, match="past the 2 paths"):
        next(iter(s))


def test_daemon_refusal_warns_once_or_raises(fake_mount):
    mnt, ctl = fake_mount
    ctl.reply = lambda line: b"ERR 22\n"
    s = ft.OrderedSampler([1, 0], ["a", "b"], mnt)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert list(s) == [1, 0]
        assert list(s) == [1, 0]
    assert len([x for x in w if issubclass(x.category, RuntimeWarning)]) == 1
    assert "not sent" in str(w[0].message)
    assert s.sent == 0
    strict = ft.OrderedSampler([1, 0], ["a", "b"], mnt, strict=True)
    with pytest.raises(OSError) as ei:
        next(iter(strict))
    assert ei.value.errno == errno.EINVAL


def test_batch_sampler_flattened_order(fake_mount):
    mnt, ctl = fake_mount

    class Batches:          # shaped like paddle.io.BatchSampler: lists of indices
        def __init__(self):
            self.epoch = 0

        def __iter__(self):
            return iter([[3, 1], [0, 4], [2]] if self.epoch == 0 else [[4, 3], [2, 1], [0]])

        def __len__(self):
            return 3

        def set_epoch(self, e):
            self.epoch = e

    paths = ["d/%d" % i for i in range(5)]
    bs = ft.OrderedBatchSampler(Batches(), paths, mnt)
    assert len(bs) == 3
    assert list(bs) == [[3, 1], [0, 4], [2]]
    bs.set_epoch(1)
    assert list(bs) == [[4, 3], [2, 1], [0]]
    assert ctl.orders() == [b"O 5 20\nd/3\nd/1\nd/0\nd/4\nd/2\n",
                            b"O 5 20\nd/4\nd/3\nd/2\nd/1\nd/0\n"]


def test_lazy_attribute_access(fake_mount):
    mnt, _ = fake_mount
    assert feedfs.torch is ft


# ---- with torch --------------------------------------------------------------

class Files(Dataset if torch is not None else object):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return i


@needs_torch
def test_torch_random_sampler(fake_mount):
    mnt, ctl = fake_mount
    paths = [mnt + "/k/%04d" % i for i in range(100)]
    ds = Files(paths)
    g = torch.Generator()
    g.manual_seed(11)
    s = ft.OrderedSampler(RandomSampler(ds, generator=g), paths, mnt)
    assert isinstance(s, torch.utils.data.Sampler)
    g2 = torch.Generator()
    g2.manual_seed(11)
    ref = RandomSampler(ds, generator=g2)
    for epoch in range(2):
        got = list(s)
        want = list(ref)
        assert got == want
        assert payload_of(ctl.orders()[epoch]) == ["k/%04d" % i for i in want]


@needs_torch
@pytest.mark.parametrize("workers", [0, 2])
def test_torch_dataloader_workers(fake_mount, workers):
    mnt, ctl = fake_mount
    paths = [mnt + "/k/%04d" % i for i in range(64)]
    ds = Files(paths)
    g = torch.Generator()
    g.manual_seed(5)
    s = ft.OrderedSampler(RandomSampler(ds, generator=g), paths, mnt)
    dl = DataLoader(ds, batch_size=8, sampler=s, num_workers=workers)
    seen = [int(x) for b in dl for x in b]
    assert len(ctl.orders()) == 1           # sent once, from this (the main) process
    assert payload_of(ctl.orders()[0]) == ["k/%04d" % i for i in seen]


@needs_torch
def test_torch_distributed_sampler_shards(fake_mount):
    mnt, ctl = fake_mount
    paths = ["k/%03d" % i for i in range(30)]
    ds = Files(paths)
    for rank in range(2):
        s = ft.OrderedSampler(DistributedSampler(ds, num_replicas=2, rank=rank, seed=3), paths, mnt)
        for epoch in range(2):
            s.set_epoch(epoch)
            ref = DistributedSampler(ds, num_replicas=2, rank=rank, seed=3)
            ref.set_epoch(epoch)
            want = list(ref)
            assert list(s) == want
            assert len(s) == len(ref) == 15
            assert payload_of(ctl.orders()[-1]) == [paths[i] for i in want]
            # Each rank's order is its own stream on a shared mount.
            assert ctl.orders()[-1].startswith(b"O 15 90 rank%d\n" % rank)


@needs_torch
def test_torch_batch_sampler(fake_mount):
    mnt, ctl = fake_mount
    paths = ["k/%03d" % i for i in range(10)]
    inner = BatchSampler(list(range(9, -1, -1)), batch_size=4, drop_last=False)
    bs = ft.OrderedBatchSampler(inner, paths, mnt)
    dl = DataLoader(Files(paths), batch_sampler=bs)
    assert [b.tolist() for b in dl] == [[9, 8, 7, 6], [5, 4, 3, 2], [1, 0]]
    assert payload_of(ctl.orders()[0]) == ["k/%03d" % i for i in range(9, -1, -1)]


def test_stream_from_a_paddle_style_distributed_batch_sampler(fake_mount):
    mnt, ctl = fake_mount

    class DistBatches:      # shaped like paddle.io.DistributedBatchSampler
        nranks, local_rank = 4, 3

        def __iter__(self):
            return iter([[1], [0]])

        def __len__(self):
            return 2

    bs = ft.OrderedBatchSampler(DistBatches(), ["a", "b"], mnt)
    assert bs.stream == "rank3"
    assert list(bs) == [[1], [0]]
    assert ctl.orders() == [b"O 2 4 rank3\nb\na\n"]


def test_stream_named_or_default_and_bad_names(fake_mount):
    mnt, ctl = fake_mount

    class Dist:             # torch's DistributedSampler shape
        rank, num_replicas = 1, 2

        def __iter__(self):
            return iter([0])

        def __len__(self):
            return 1

    assert list(ft.OrderedSampler(Dist(), ["a"], mnt, stream="job-7.r1")) == [0]
    assert list(ft.OrderedSampler(Dist(), ["a"], mnt, stream=None)) == [0]
    assert list(ft.OrderedSampler([0], ["a"], mnt)) == [0]      # not distributed
    assert ctl.orders() == [b"O 1 2 job-7.r1\na\n", b"O 1 2\na\n", b"O 1 2\na\n"]
    for bad in ("", "a b", "r/1", "x" * 65, "\u6570"):
        with pytest.raises(ValueError, match="stream name"):
            ft.OrderedSampler([0], ["a"], mnt, stream=bad)
    assert len(ctl.orders()) == 3
