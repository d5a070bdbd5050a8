#!/usr/bin/python3
"""W7 of the bench: one epoch of a real torch DataLoader over torchvision's
ImageFolder on a mount, with or without feedfs's sampler wrapper.

    loader.py ROOT MANIFEST EPOCH WORKERS [--order]

ROOT is the mount (the dataset's train/ lies under it), MANIFEST the bench's
JSON manifest of the dataset (rel path -> sha256). The sampler is a seeded
RandomSampler (seed 1000 + EPOCH); with --order it is wrapped in
feedfs.torch.OrderedSampler, which sends the epoch's order to the mount at
the first next(): the one line a user changes. Every image's bytes are
checked against the manifest in the worker that reads them (a mismatch ends
the epoch with an error), then decoded with PIL, resized to 64x64 and made a
tensor, as a training loop would. Prints one JSON line: samples, the epoch's
seconds (iteration only), the ImageFolder scan's seconds, samples/s, and the
error if any. Timing lives here, never in a test.
"""
import hashlib
import io
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))


def main():
    root, manifest, epoch, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    order = "--order" in sys.argv[5:]
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader, RandomSampler
    from torchvision import datasets, transforms

    with open(manifest) as f:
        want = json.load(f)["files"]

    def load(path):
        with open(path, "rb") as f:
            b = f.read()
        rel = os.path.relpath(path, root)
        if hashlib.sha256(b).hexdigest() != want.get(rel):
            raise ValueError("wrong bytes: %s" % rel)
        return Image.open(io.BytesIO(b)).convert("RGB")

    t0 = time.monotonic()
    ds = datasets.ImageFolder(os.path.join(root, "train"), loader=load,
                              transform=transforms.Compose([transforms.Resize((64, 64)),
                                                            transforms.ToTensor()]))
    scan_s = time.monotonic() - t0
    g = torch.Generator()
    g.manual_seed(1000 + epoch)
    sampler = RandomSampler(ds, generator=g)
    if order:
        import feedfs.torch
        sampler = feedfs.torch.OrderedSampler(sampler, [p for p, _ in ds.samples], root, strict=True)
    dl = DataLoader(ds, batch_size=32, sampler=sampler, num_workers=workers)
    out = {"samples": 0, "scan_s": round(scan_s, 3), "error": None, "workers": workers,
           "order": order, "dataset": len(ds)}
    t0 = time.monotonic()
    try:
        for images, labels in dl:
            out["samples"] += len(labels)
    except Exception as e:  # noqa: BLE001 - reported, the bench decides
        out["error"] = str(e).strip().splitlines()[-1][:300]
    el = time.monotonic() - t0
    out["wall_s"] = round(el, 3)
    out["samples_per_s"] = round(out["samples"] / el, 1) if el > 0 else 0.0
    if not out["error"] and out["samples"] != len(ds):
        out["error"] = "%d of %d samples" % (out["samples"], len(ds))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
