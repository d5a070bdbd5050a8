"""feedfs.torch.FolderDataset / ListDataset: items are the files' real bytes
(or transform(bytes)) and class indices as ImageFolder assigns them; with
OrderedSampler / OrderedBatchSampler and no paths given, the order sent is
the dataset's paths in the drawn order."""
import errno
import os
import subprocess
import sys

import pytest

import feedfs.paddle as fp
import feedfs.torch as ft

from test_samplers import EpochShuffle, payload_of

try:
    import torch
    from torch.utils.data import DataLoader, RandomSampler
except Exception:  # noqa: BLE001
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (Debian: python3-torch)")


def content(rel):
    """Distinct bytes per file (its name, repeated, and its length varies)."""
    return (rel.encode() + b"|") * (3 + len(rel) % 7)


def make_tree(root, files):
    for rel in files:
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(content(rel))


TREE = ["train/dog/b.jpg", "train/dog/a.jpg", "train/cat/z.png", "train/cat/sub/y.jpg",
        "train/ant/x.JPG", "train/ant/notes.txt"]


@pytest.fixture
def tree(fake_mount):
    mnt, ctl = fake_mount
    make_tree(mnt, TREE)
    with open(os.path.join(mnt, "train", "README"), "wb") as f:    # not a class: a file
        f.write(b"x")
    return mnt, ctl


def test_folder_dataset_classes_paths_and_bytes(tree):
    mnt, _ = tree
    ds = ft.FolderDataset(os.path.join(mnt, "train"))
    assert ds.classes == ["ant", "cat", "dog"]
    assert ds.class_to_idx == {"ant": 0, "cat": 1, "dog": 2}
    want = ["train/ant/notes.txt", "train/ant/x.JPG", "train/cat/z.png", "train/cat/sub/y.jpg",
            "train/dog/a.jpg", "train/dog/b.jpg"]
    assert ds.paths == [os.path.join(mnt, r) for r in want]
    assert ds.targets == [0, 0, 1, 1, 2, 2]
    assert len(ds) == 6
    assert [ds[i] for i in range(6)] == [(content(r), t) for r, t in zip(want, ds.targets)]
    assert ds.samples == list(zip(ds.paths, ds.targets))
    with pytest.raises(IndexError):
        ds[6]


def test_folder_dataset_transform_and_extensions(tree):
    mnt, _ = tree
    ds = ft.FolderDataset(os.path.join(mnt, "train"), transform=len, extensions=(".jpg", ".png"))
    assert [os.path.relpath(p, mnt) for p in ds.paths] == [
        "train/ant/x.JPG", "train/cat/z.png", "train/cat/sub/y.jpg", "train/dog/a.jpg",
        "train/dog/b.jpg"]
    assert ds[1] == (len(content("train/cat/z.png")), 1)
    with pytest.raises(FileNotFoundError, match="class 'ant' has no file ending in .gif"):
        ft.FolderDataset(os.path.join(mnt, "train"), extensions=(".gif",))
    with pytest.raises(FileNotFoundError, match="no class directory"):
        ft.FolderDataset(os.path.join(mnt, "train", "dog"))
    with pytest.raises(FileNotFoundError) as ei:
        ft.FolderDataset(os.path.join(mnt, "nope"))
    assert ei.value.errno == errno.ENOENT


def test_folder_dataset_matches_torchvision_imagefolder(tree):
    datasets = pytest.importorskip("torchvision.datasets",
                                   reason="torchvision is not installed (Debian: python3-torchvision)")
    mnt, _ = tree
    root = os.path.join(mnt, "train")
    ref = datasets.ImageFolder(root, loader=lambda p: open(p, "rb").read(),
                               is_valid_file=lambda p: True)
    ds = ft.FolderDataset(root)
    assert (ds.classes, ds.class_to_idx, ds.samples) == (ref.classes, ref.class_to_idx, ref.samples)
    assert [ds[i] for i in range(len(ds))] == [ref[i] for i in range(len(ref))]


def test_list_dataset_labels_and_errors(tree):
    mnt, _ = tree
    rels = ["train/dog/a.jpg", "train/cat/z.png"]
    ds = ft.ListDataset([os.path.join(mnt, r) for r in rels], [7, 3])
    assert [ds[0], ds[1]] == [(content(rels[0]), 7), (content(rels[1]), 3)]
    unl = ft.ListDataset([os.path.join(mnt, r) for r in rels], transform=bytes.upper)
    assert unl[1] == (content(rels[1]).upper(), ft.UNLABELED) and ft.UNLABELED == -1
    with pytest.raises(ValueError, match="2 paths but 1 labels"):
        ft.ListDataset([os.path.join(mnt, r) for r in rels], [1])


def test_list_dataset_from_label_file(tree, tmp_path):
    mnt, _ = tree
    os.makedirs(os.path.join(mnt, "lists"))
    os.makedirs(os.path.join(mnt, "odd"))
    with open(os.path.join(mnt, "odd", "a b.jpg"), "wb") as f:
        f.write(b"spaced")
    lst = os.path.join(mnt, "lists", "train.txt")
    with open(lst, "w") as f:
        f.write("../train/dog/b.jpg 2\n\n../odd/a b.jpg\t11\n%s 0\n"
                % os.path.join(mnt, "train/ant/x.JPG"))
    ds = ft.ListDataset.from_file(lst)
    assert ds.paths == [os.path.join(mnt, "train/dog/b.jpg"), os.path.join(mnt, "odd/a b.jpg"),
                        os.path.join(mnt, "train/ant/x.JPG")]
    assert [ds[i] for i in range(3)] == [(content("train/dog/b.jpg"), 2), (b"spaced", 11),
                                         (content("train/ant/x.JPG"), 0)]
    # root= instead of the list's directory, no labels, a transform
    lst2 = str(tmp_path / "names.txt")
    with open(lst2, "w") as f:
        f.write("train/cat/z.png\ntrain/dog/a.jpg\n")
    ds2 = ft.ListDataset.from_file(lst2, root=mnt, transform=len)
    assert [ds2[0], ds2[1]] == [(len(content("train/cat/z.png")), -1),
                                (len(content("train/dog/a.jpg")), -1)]
    with open(lst2, "a") as f:
        f.write("train/dog/b.jpg 1\n")
    with pytest.raises(ValueError, match=r"names\.txt:3: a label where the lines before have none"):
        ft.ListDataset.from_file(lst2, root=mnt)


def test_sampler_finds_paths_and_mount_in_the_dataset(tree):
    mnt, ctl = tree
    ds = ft.FolderDataset(os.path.join(mnt, "train"))

    class Shuffle(EpochShuffle):        # a sampler over a dataset, as torch's have
        data_source = ds

    s = ft.OrderedSampler(Shuffle(len(ds)))
    assert s.mountpoint == mnt
    got = list(s)
    assert sorted(got) == list(range(6)) and got != list(range(6))
    assert payload_of(ctl.orders()[0]) == [os.path.relpath(ds.paths[i], mnt) for i in got]


def test_batch_sampler_paddle_shaped_finds_paths(tree):
    mnt, ctl = tree
    ds = fp.ListDataset([os.path.join(mnt, r) for r in TREE[:4]], [0, 1, 2, 3])

    class Seq:                          # paddle.io.SequenceSampler's shape
        def __init__(self, data_source):
            self.data_source = data_source

        def __iter__(self):
            return iter(range(len(self.data_source) - 1, -1, -1))

    class Batches:                      # paddle.io.BatchSampler's shape
        def __init__(self, dataset, batch_size):
            self.sampler, self.batch_size = Seq(dataset), batch_size

        def __iter__(self):
            b = []
            for i in self.sampler:
                b.append(i)
                if len(b) == self.batch_size:
                    yield b
                    b = []
            if b:
                yield b

        def __len__(self):
            return 2

    bs = fp.OrderedBatchSampler(Batches(ds, 3))
    assert list(bs) == [[3, 2, 1], [0]]
    assert payload_of(ctl.orders()[0]) == [TREE[i] for i in (3, 2, 1, 0)]


def test_no_paths_anywhere_or_relative_is_an_error(fake_mount):
    mnt, ctl = fake_mount
    with pytest.raises(TypeError, match="neither .paths nor .samples"):
        ft.OrderedSampler([0, 1])
    with pytest.raises(ValueError, match="mountpoint= is needed"):
        ft.OrderedSampler([0], ["rel/a"])
    assert ctl.orders() == []


def test_dataset_outside_any_mount_is_enoent(tmp_path):
    """No fake mount here: the real /proc/self/mountinfo lookup."""
    p = tmp_path / "c" / "f"
    p.parent.mkdir()
    p.write_bytes(b"1")
    ds = ft.FolderDataset(str(tmp_path))
    assert ds[0] == (b"1", 0)

    class Seq:
        data_source = ds

        def __iter__(self):
            return iter([0])

    with pytest.raises(OSError) as ei:
        ft.OrderedSampler(Seq())
    assert ei.value.errno == errno.ENOENT and "is not a feedfs mount" in str(ei.value)


def test_paddle_module_imports_neither_framework():
    code = ("import sys, feedfs.paddle, feedfs.datasets, feedfs.order\n"
            "bad = sorted(m for m in ('torch', 'paddle') if m in sys.modules)\n"
            "print('imported:', bad)\n")
    env = dict(os.environ)
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                        cwd=os.path.dirname(os.path.abspath(__file__)), timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == "imported: []\n"


@needs_torch
@pytest.mark.parametrize("workers", [0, 2])
def test_folder_dataset_through_a_dataloader(tree, workers):
    mnt, ctl = tree
    ds = ft.FolderDataset(os.path.join(mnt, "train"))
    g = torch.Generator()
    g.manual_seed(3)
    loader = DataLoader(ds, batch_size=None, num_workers=workers, collate_fn=lambda x: x,
                        sampler=ft.OrderedSampler(RandomSampler(ds, generator=g), strict=True))
    seen = list(loader)
    assert sorted(seen) == sorted(zip((content(os.path.relpath(p, mnt)) for p in ds.paths),
                                      ds.targets))
    by_bytes = {content(os.path.relpath(p, mnt)): os.path.relpath(p, mnt) for p in ds.paths}
    assert len(ctl.orders()) == 1
    assert payload_of(ctl.orders()[0]) == [by_bytes[b] for b, _ in seen]


@needs_torch
def test_paths_through_distributed_sampler_and_imagefolder(tree):
    from torch.utils.data import DistributedSampler
    mnt, ctl = tree
    ds = ft.FolderDataset(os.path.join(mnt, "train"))
    s = ft.OrderedSampler(DistributedSampler(ds, num_replicas=2, rank=1, seed=5))
    assert s.stream == "rank1"
    got = list(s)
    assert len(got) == 3
    assert ctl.orders()[-1].startswith(b"O 3 ")
    assert payload_of(ctl.orders()[-1]) == [os.path.relpath(ds.paths[i], mnt) for i in got]
    datasets = pytest.importorskip("torchvision.datasets",
                                   reason="torchvision is not installed (Debian: python3-torchvision)")
    ref = datasets.ImageFolder(os.path.join(mnt, "train"), loader=lambda p: p,
                               is_valid_file=lambda p: True)
    s = ft.OrderedSampler(RandomSampler(ref))
    got = list(s)
    assert payload_of(ctl.orders()[-1]) == [os.path.relpath(ref.samples[i][0], mnt) for i in got]
