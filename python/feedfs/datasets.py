"""feedfs.datasets — map-style datasets that return samples (standard library only).

DESIGN
A dataset here is a list of files fixed at construction, each with a class
index, and __getitem__(i) reads file i whole: (bytes, class_index), or
(transform(bytes), class_index). Nothing is imported from torch or paddle:
both frameworks' loaders take any object with __len__ and __getitem__
(torch.utils.data.Dataset and paddle.io.Dataset are duck-typed). The
datasets also carry what the ordered samplers need to send the loader's
order without being told the paths: .paths (paths[i] is the file of item i,
absolute) and .root. So `OrderedSampler(RandomSampler(ds))` or
`OrderedBatchSampler(BatchSampler(ds, ...))` finds them through the wrapped
sampler's data_source (torch, Paddle) or dataset (DistributedSampler,
DistributedBatchSampler).

  FolderDataset(root)      root/<class>/.../<file>: classes are root's
                           sub-directories, sorted (torchvision ImageFolder's
                           rule); files sorted per class, walked recursively.
  ListDataset(paths, labels)     given paths (and integer labels; -1 when
                           none); ListDataset.from_file(list) reads
                           "path[ label]" lines, as label files have them.

Files are listed once (on a feedfs mount: LIST requests, or the daemon's
cached listing) and opened only when an item is read.
"""
from __future__ import annotations

import os
from typing import (Callable, Dict, Generic, Iterable, List, Optional, Sequence, Tuple, TypeVar,
                    Union, overload)

from . import StrPath

__all__ = ["FolderDataset", "ListDataset", "UNLABELED"]

T = TypeVar("T")
U = TypeVar("U")

# The class index of a ListDataset item that has no label.
UNLABELED = -1


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class _Files(Generic[T]):
    """What both datasets share: paths, targets, transform, the item read."""

    paths: List[str]
    targets: List[int]
    transform: Optional[Callable[[bytes], T]]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Tuple[T, int]:
        """(the bytes of file index, or transform(those bytes), its class index)."""
        data = _read(self.paths[index])
        if self.transform is None:
            # T is bytes here: the overloads of __init__ bind it so.
            return data, self.targets[index]    # type: ignore[return-value]
        return self.transform(data), self.targets[index]

    @property
    def samples(self) -> List[Tuple[str, int]]:
        """[(path, class index)] as torchvision's ImageFolder.samples."""
        return list(zip(self.paths, self.targets))


class FolderDataset(_Files[T]):
    """Files under root/<class>/, class indices as torchvision's ImageFolder.

    classes: the names of root's sub-directories, sorted (entries that are
    not directories are ignored); class_to_idx maps each to its position.
    Each class's files are found by walking its directory recursively, sorted
    by directory and name; extensions (e.g. (".jpg", ".png"), compared
    lower-case) keeps only files whose name ends with one of them, None keeps
    every file. dataset[i] is (sample, class_index), sample the file's bytes,
    or transform(bytes) when transform is given. .paths[i] and .targets[i]
    are item i's absolute path and class index; .root is root, absolute.

    Raises FileNotFoundError when root has no sub-directory or a class has no
    file, and OSError (ENOENT, ENOTDIR...) when root cannot be listed."""

    @overload
    def __init__(self: FolderDataset[bytes], root: StrPath, transform: None = None, *,
                 extensions: Optional[Sequence[str]] = None) -> None: ...

    @overload
    def __init__(self, root: StrPath, transform: Callable[[bytes], T], *,
                 extensions: Optional[Sequence[str]] = None) -> None: ...

    def __init__(self, root: StrPath, transform: Optional[Callable[[bytes], T]] = None, *,
                 extensions: Optional[Sequence[str]] = None) -> None:
        self.root = os.path.abspath(os.fsdecode(root))
        self.transform = transform
        exts = None if extensions is None else tuple(e.lower() for e in extensions)
        with os.scandir(self.root) as it:
            self.classes: List[str] = sorted(e.name for e in it if e.is_dir())
        if not self.classes:
            raise FileNotFoundError("feedfs.FolderDataset: no class directory in %s" % self.root)
        self.class_to_idx: Dict[str, int] = {c: i for i, c in enumerate(self.classes)}
        self.paths = []
        self.targets = []
        for c in self.classes:
            n = len(self.paths)
            for top, _dirs, files in sorted(os.walk(os.path.join(self.root, c), followlinks=True)):
                for f in sorted(files):
                    if exts is None or f.lower().endswith(exts):
                        self.paths.append(os.path.join(top, f))
            if len(self.paths) == n:
                raise FileNotFoundError("feedfs.FolderDataset: class %r has no file%s in %s"
                                        % (c, "" if exts is None else " ending in %s" % "/".join(exts),
                                           os.path.join(self.root, c)))
            self.targets += [self.class_to_idx[c]] * (len(self.paths) - n)

    def __repr__(self) -> str:
        return "FolderDataset(%r: %d files, %d classes)" % (self.root, len(self.paths),
                                                             len(self.classes))


class ListDataset(_Files[T]):
    """The files of a list, with integer labels: dataset[i] is (sample,
    labels[i]) (UNLABELED, -1, when labels is None), sample the bytes of
    paths[i], or transform(bytes).

    paths are made absolute here (os.path.abspath: relative to the current
    directory now); .paths, .targets as FolderDataset's. Raises ValueError
    when labels is not as long as paths."""

    @overload
    def __init__(self: ListDataset[bytes], paths: Iterable[StrPath],
                 labels: Optional[Iterable[int]] = None, transform: None = None) -> None: ...

    @overload
    def __init__(self, paths: Iterable[StrPath], labels: Optional[Iterable[int]],
                 transform: Callable[[bytes], T]) -> None: ...

    @overload
    def __init__(self, paths: Iterable[StrPath], *,
                 transform: Callable[[bytes], T]) -> None: ...

    def __init__(self, paths: Iterable[StrPath], labels: Optional[Iterable[int]] = None,
                 transform: Optional[Callable[[bytes], T]] = None) -> None:
        self.paths = [os.path.abspath(os.fsdecode(p)) for p in paths]
        if labels is None:
            self.targets = [UNLABELED] * len(self.paths)
        else:
            self.targets = [int(x) for x in labels]
            if len(self.targets) != len(self.paths):
                raise ValueError("feedfs.ListDataset: %d paths but %d labels"
                                 % (len(self.paths), len(self.targets)))
        self.transform = transform
        self.root = os.path.commonpath(self.paths) if self.paths else ""

    @overload
    @classmethod
    def from_file(cls, list_file: StrPath, root: Optional[StrPath] = None,
                  transform: None = None) -> ListDataset[bytes]: ...

    @overload
    @classmethod
    def from_file(cls, list_file: StrPath, root: Optional[StrPath],
                  transform: Callable[[bytes], U]) -> ListDataset[U]: ...

    @overload
    @classmethod
    def from_file(cls, list_file: StrPath, *,
                  transform: Callable[[bytes], U]) -> ListDataset[U]: ...

    @classmethod
    def from_file(cls, list_file: StrPath, root: Optional[StrPath] = None,
                  transform: Optional[Callable[[bytes], U]] = None
                  ) -> Union[ListDataset[bytes], ListDataset[U]]:
        """A ListDataset of a label file: one item per non-empty line,
        "path" or "path<spaces or tab>label" (label an integer; either every
        line has one or none does). A relative path is under root (default:
        the list file's directory). Raises ValueError naming the line for a
        line with a label among lines without, or the other way round."""
        base = os.fsdecode(root) if root is not None else os.path.dirname(
            os.path.abspath(os.fsdecode(list_file)))
        paths: List[str] = []
        labels: List[int] = []
        with open(list_file, "r", encoding="utf-8", errors="surrogateescape") as f:
            for no, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                head, _, tail = line.rstrip().rpartition(" ") if "\t" not in line else \
                    line.rstrip().rpartition("\t")
                has = bool(head.strip()) and tail.lstrip("-").isdigit()
                if paths and has != bool(labels):
                    raise ValueError("feedfs.ListDataset: %s:%d: %s label where the lines before "
                                     "have %s" % (os.fsdecode(list_file), no,
                                                  "a" if has else "no", "none" if has else "one"))
                p = head.rstrip() if has else line.strip()
                paths.append(os.path.join(base, p))
                if has:
                    labels.append(int(tail))
        if transform is None:
            return ListDataset(paths, labels if labels else None)
        return ListDataset(paths, labels if labels else None, transform)

    def __repr__(self) -> str:
        return "ListDataset(%d files)" % len(self.paths)
