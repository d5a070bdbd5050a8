"""Resuming mid-epoch: state_dict()/load_state_dict() of the wrappers and of
their epoch iterators (torchdata's Stateful protocol). A resumed epoch yields
exactly the rest of the saved one and sends only the rest's paths; the epoch
after it is drawn anew. Also persistent DataLoader workers (one order per
epoch), and StatefulDataLoader / Lightning where installed."""

import pytest

import feedfs.torch as ft

from test_samplers import EpochShuffle, payload_of

try:
    import torch
    from torch.utils.data import DataLoader, Dataset, RandomSampler
except Exception:  # noqa: BLE001
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (Debian: python3-torch)")

N = 20


def names(ix):
    return ["d/%02d" % i for i in ix]


def drawn(epoch):
    e = EpochShuffle(N)
    e.set_epoch(epoch)
    return list(e)


def test_sampler_state_resumes_the_rest_and_sends_only_it(fake_mount):
    mnt, ctl = fake_mount
    paths = names(range(N))
    s = ft.OrderedSampler(EpochShuffle(N), paths, mnt)
    assert s.state_dict() == {"rest": None}             # nothing started yet
    it = iter(s)
    got = [next(it) for _ in range(7)]
    want = drawn(0)
    assert got == want[:7]
    state = s.state_dict()
    assert state == {"rest": want[7:]} == it.state_dict()

    # "a new process": a fresh sampler over the same paths
    s2 = ft.OrderedSampler(EpochShuffle(N), paths, mnt)
    s2.load_state_dict(state)
    assert s2.state_dict() == state                     # pending, not yet started
    iter(s2)                                            # dropped unused (DataLoader): takes nothing
    assert list(s2) == want[7:]
    assert payload_of(ctl.orders()[-1]) == names(want[7:])
    assert s2.sent == N - 7
    assert s2.state_dict() == {"rest": None}            # that epoch is over
    assert list(s2) == want                             # the next one is drawn anew
    assert payload_of(ctl.orders()[-1]) == names(want)
    assert len(ctl.orders()) == 3


def test_iterator_state_as_statefuldataloader_uses_it(fake_mount):
    """StatefulDataLoader saves the sampler iterator's state_dict() and loads
    it into the next iter() of the sampler before its first next()."""
    mnt, ctl = fake_mount
    paths = names(range(N))
    s = ft.OrderedSampler(EpochShuffle(N), paths, mnt)
    it = iter(s)
    for _ in range(12):
        next(it)
    state = it.state_dict()
    it2 = iter(ft.OrderedSampler(EpochShuffle(N), paths, mnt))
    it2.load_state_dict(state)
    assert list(it2) == drawn(0)[12:]
    assert payload_of(ctl.orders()[-1]) == names(drawn(0)[12:])
    assert it2.state_dict() == {"rest": None}
    it3 = iter(ft.OrderedSampler(EpochShuffle(N), paths, mnt))
    it3.load_state_dict({"rest": None})                 # an epoch that had ended: draw
    assert list(it3) == drawn(0)


def test_batch_sampler_state(fake_mount):
    mnt, ctl = fake_mount

    class Batches:
        def __iter__(self):
            return iter([[3, 1], [0, 4], [2]])

        def __len__(self):
            return 3

    paths = names(range(5))
    bs = ft.OrderedBatchSampler(Batches(), paths, mnt)
    it = iter(bs)
    assert next(it) == [3, 1]
    state = bs.state_dict()
    assert state == {"rest": [[0, 4], [2]]}
    bs2 = ft.OrderedBatchSampler(Batches(), paths, mnt)
    bs2.load_state_dict(state)
    assert list(bs2) == [[0, 4], [2]]
    assert payload_of(ctl.orders()[-1]) == names([0, 4, 2])


@pytest.mark.parametrize("state, what", [
    ({"nope": 1}, "not a sampler state"),
    ([1, 2], "not a sampler state"),
    ({"rest": "abc"}, "must be a list or None, not str"),
    ({"rest": [0, N]}, "not one of the 20 paths"),
    ({"rest": [0, -1]}, "not one of the 20 paths"),
    ({"rest": [[0]]}, "not one of the 20 paths"),
])
def test_bad_states_are_refused(fake_mount, state, what):
    mnt, ctl = fake_mount
    s = ft.OrderedSampler(EpochShuffle(N), names(range(N)), mnt)
    with pytest.raises(ValueError, match=what):
        s.load_state_dict(state)
    assert list(s) == drawn(0)                          # unchanged by the refusal
    bs = ft.OrderedBatchSampler([[0, 1]], names(range(N)), mnt)
    with pytest.raises(ValueError):
        bs.load_state_dict({"rest": [[0, N]]})


class Indices(Dataset if torch is not None else object):
    def __init__(self, n):
        self.paths = names(range(n))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return i


@needs_torch
def test_persistent_workers_one_order_per_epoch(fake_mount):
    mnt, ctl = fake_mount
    ds = Indices(N)
    g = torch.Generator()
    g.manual_seed(9)
    s = ft.OrderedSampler(RandomSampler(ds, generator=g), mountpoint=mnt)
    loader = DataLoader(ds, batch_size=4, sampler=s, num_workers=2, persistent_workers=True)
    for epoch in range(3):
        seen = [int(x) for b in loader for x in b]
        assert sorted(seen) == list(range(N))
        assert len(ctl.orders()) == epoch + 1
        assert payload_of(ctl.orders()[epoch]) == names(seen)
    assert ctl.orders()[0] != ctl.orders()[1]


@needs_torch
def test_stateful_dataloader_resume(fake_mount):
    sdl = pytest.importorskip("torchdata.stateful_dataloader",
                              reason="torchdata (StatefulDataLoader) is not installed (not in Debian 12)")
    mnt, ctl = fake_mount
    ds = Indices(N)
    g = torch.Generator()
    g.manual_seed(4)
    loader = sdl.StatefulDataLoader(ds, batch_size=2, num_workers=0,
                                    sampler=ft.OrderedSampler(RandomSampler(ds, generator=g),
                                                              mountpoint=mnt))
    it = iter(loader)
    first = [int(x) for _ in range(3) for x in next(it)]
    state = loader.state_dict()
    rest = [int(x) for b in it for x in b]
    loader2 = sdl.StatefulDataLoader(ds, batch_size=2, num_workers=0,
                                     sampler=ft.OrderedSampler(RandomSampler(ds), mountpoint=mnt))
    loader2.load_state_dict(state)
    resumed = [int(x) for b in loader2 for x in b]
    assert resumed == rest and sorted(first + rest) == list(range(N))
    assert payload_of(ctl.orders()[-1]) == names(rest)


@needs_torch
def test_lightning_distributed_wrapper_shards_the_whole_order(fake_mount):
    """What docs/PYTHON.md warns of: Lightning's DistributedSamplerWrapper
    around an OrderedSampler gives each rank a shard, but the order sent is
    the whole epoch on the default stream (use_distributed_sampler=False and
    an OrderedSampler over a DistributedSampler instead)."""
    dist = pytest.importorskip("lightning.fabric.utilities.distributed",
                               reason="Lightning is not installed (not in Debian 12)")
    mnt, ctl = fake_mount
    ds = Indices(N)
    s = ft.OrderedSampler(RandomSampler(ds), mountpoint=mnt)
    w = dist.DistributedSamplerWrapper(s, num_replicas=2, rank=1, shuffle=False)
    got = list(w)
    assert len(got) == N // 2
    assert s.stream is None and len(payload_of(ctl.orders()[-1])) == N


def test_state_loaded_into_both_sampler_and_iterator(fake_mount):
    """torchdata's BatchSampler iterator and single-process loader load the
    same state into the sampler and then into its new iterator: the rest is
    yielded once, and the epoch after it is a fresh draw, not the rest again."""
    mnt, ctl = fake_mount
    paths = names(range(N))
    s = ft.OrderedSampler(EpochShuffle(N), paths, mnt)
    it = iter(s)
    for _ in range(5):
        next(it)
    state = s.state_dict()
    s2 = ft.OrderedSampler(EpochShuffle(N), paths, mnt)
    s2.load_state_dict(state)
    it2 = iter(s2)
    it2.load_state_dict(state)
    assert list(it2) == drawn(0)[5:]
    assert list(s2) == drawn(0)
    assert [payload_of(o) for o in ctl.orders()[-2:]] == [names(drawn(0)[5:]), names(drawn(0))]
