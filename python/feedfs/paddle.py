"""feedfs.paddle — the same for PaddlePaddle, without importing paddle.

  OrderedBatchSampler(batch_sampler[, paths, mountpoint])
        batch_sampler= of paddle.io.DataLoader, over paddle.io.BatchSampler or
        DistributedBatchSampler (its rank becomes the stream "rank<N>")
  FolderDataset(root, transform=None), ListDataset(paths, labels=None, transform=None)
        map-style datasets (paddle.io.Dataset is duck-typed: __len__ and
        __getitem__), items (sample, class_index)

So

    ds = feedfs.paddle.FolderDataset("/mnt/data/train", transform=decode)
    bs = paddle.io.BatchSampler(sampler=paddle.io.RandomSampler(ds), batch_size=64)
    loader = paddle.io.DataLoader(ds, batch_sampler=feedfs.paddle.OrderedBatchSampler(bs))

sends each epoch's order (the batches flattened) to the mount holding the
dataset; the paths are found through bs.sampler.data_source. (Older Paddle
asserts that a dataset given to BatchSampler itself is a paddle.io.Dataset:
hence sampler=.) These are the objects of feedfs.order and feedfs.datasets,
whose docstrings say the rest.
"""
from .datasets import UNLABELED, FolderDataset, ListDataset
from .order import AUTO, OrderedBatchSampler, OrderedSampler, dataset_paths

__all__ = ["OrderedBatchSampler", "OrderedSampler", "FolderDataset", "ListDataset", "UNLABELED",
           "AUTO", "dataset_paths"]
