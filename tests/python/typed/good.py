"""A typed user of feedfs: mypy --strict must pass on it (test_typing.py)."""
from typing import Any, Dict, List, Tuple

import feedfs
import feedfs.paddle
import feedfs.torch


def decode(b: bytes) -> List[int]:
    return list(b[:4])


def main(root: str) -> None:
    raw = feedfs.torch.FolderDataset(root)
    item: Tuple[bytes, int] = raw[0]
    decoded = feedfs.torch.FolderDataset(root, transform=decode, extensions=[".jpg"])
    pixels: Tuple[List[int], int] = decoded[0]
    listed = feedfs.torch.ListDataset([root + "/a", root + "/b"], [0, 1])
    first: bytes = listed[0][0]
    from_file = feedfs.torch.ListDataset.from_file(root + "/train.txt", transform=len)
    size: int = from_file[0][0]
    paddle_ds = feedfs.paddle.FolderDataset(root, transform=decode)
    sampler = feedfs.torch.OrderedSampler(range(len(raw)), raw.paths, root, strict=True,
                                          stream="rank0")
    order: List[int] = list(sampler)
    state: Dict[str, Any] = sampler.state_dict()
    sampler.load_state_dict(state)
    batches = feedfs.paddle.OrderedBatchSampler([[0, 1], [2]], raw.paths)
    flat: List[List[int]] = list(batches)
    n: int = feedfs.send_order(root, [b"a", "b"], timeout=5.0, stream=None)
    feedfs.clear_order(root, stream="rank0")
    counters: Dict[str, Any] = feedfs.stats(root)
    version: str = feedfs.__version__
    print(item, pixels, first, size, paddle_ds, order, flat, n, counters, version)
