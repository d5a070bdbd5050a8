"""feedfs.torch — PyTorch's names for the order wrappers and the datasets.

  OrderedSampler(sampler[, paths, mountpoint])   sampler= of a DataLoader
  OrderedBatchSampler(batch_sampler[, ...])      batch_sampler= of a DataLoader
  FolderDataset(root, transform=None)            (sample, class_index), ImageFolder's classes
  ListDataset(paths, labels=None, transform=None)   the same from a list (from_file: a label file)

The wrappers are feedfs.order's (its docstring: what is sent, when, and
resuming with state_dict/load_state_dict); here they also derive from
torch.utils.data.Sampler when torch can be imported, so isinstance checks
pass; without torch (or with a broken one) they work as plain iterables.
The datasets are feedfs.datasets', duck-typed torch Datasets. So

    ds = feedfs.torch.FolderDataset("/mnt/data/train", transform=decode)
    loader = DataLoader(ds, batch_size=256, num_workers=8,
                        sampler=feedfs.torch.OrderedSampler(RandomSampler(ds)))

sends each epoch's order to the mount holding /mnt/data/train (the paths
come from ds through RandomSampler's data_source).

Lightning: Trainer(use_distributed_sampler=False) and an OrderedSampler over
your own DistributedSampler (Lightning would otherwise wrap the
OrderedSampler in its DistributedSamplerWrapper: every rank would send the
whole epoch on the default stream). docs/PYTHON.md has the complete examples.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .datasets import UNLABELED, FolderDataset, ListDataset
from .order import AUTO, dataset_paths
from .order import OrderedBatchSampler as _OrderedBatchSampler
from .order import OrderedSampler as _OrderedSampler

__all__ = ["OrderedSampler", "OrderedBatchSampler", "FolderDataset", "ListDataset", "UNLABELED",
           "AUTO", "dataset_paths"]

if TYPE_CHECKING:
    OrderedSampler = _OrderedSampler
    OrderedBatchSampler = _OrderedBatchSampler
else:
    try:
        from torch.utils.data import Sampler as _TorchSampler
    except Exception:  # noqa: BLE001 - no torch (or a broken one): any iterable works
        _TorchSampler = None

    if _TorchSampler is None:
        OrderedSampler = _OrderedSampler
        OrderedBatchSampler = _OrderedBatchSampler
    else:
        class OrderedSampler(_OrderedSampler, _TorchSampler):
            __doc__ = _OrderedSampler.__doc__

        class OrderedBatchSampler(_OrderedBatchSampler, _TorchSampler):
            __doc__ = _OrderedBatchSampler.__doc__
