"""Wrong calls that mypy must reject, each on the line test_typing.py names."""
import feedfs
import feedfs.torch

ds = feedfs.torch.FolderDataset("/mnt/x", transform=len)
sample: bytes = ds[0][0]
feedfs.send_order("/mnt/x", ["a"], timeout="30")
feedfs.torch.OrderedSampler([0], ["a"], "/mnt/x", strict="yes")
feedfs.torch.ListDataset(["/mnt/x/a"], ["cat"])
count: str = feedfs.clear_order("/mnt/x")
feedfs.torch.FolderDataset("/mnt/x", transform=lambda s: s.upper(), extension=".jpg")
