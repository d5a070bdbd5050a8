"""feedfs.device._ipc_handle: the CUDA IPC handle of a torch tensor, as
torch's own export gives it when the driver is not asked (no libcuda here).
torch 2.11 on an H200 prefixed the 64 bytes with a version byte and the kind;
the daemon must get the 64 bytes alone, and an expandable segment none."""
import pytest

from feedfs import device

HANDLE = bytes(range(64))


class Storage:
    def __init__(self, handle, off):
        self.share = (0, handle, 1 << 20, off)

    def _share_cuda_(self):
        return self.share


class Tensor:
    def __init__(self, handle, off=0, storage_offset=0, element_size=1):
        self.st = Storage(handle, off)
        self.so, self.es = storage_offset, element_size

    def untyped_storage(self):
        return self.st

    def storage_offset(self):
        return self.so

    def element_size(self):
        return self.es


@pytest.fixture(autouse=True)
def no_driver(monkeypatch):
    monkeypatch.setattr(device, "_cu", False)


@pytest.mark.parametrize("raw", [HANDLE, b"c" + HANDLE, b"\x01c" + HANDLE])
def test_legacy_handle_any_torch(raw):
    assert device._ipc_handle(Tensor(raw, off=4096, storage_offset=3, element_size=4)) == \
        (HANDLE, 4096 + 12)


@pytest.mark.parametrize("raw", [b"\x01e" + HANDLE, b"e" + HANDLE, HANDLE[:63], b"", "text"])
def test_no_legacy_handle(raw):
    assert device._ipc_handle(Tensor(raw)) is None


def test_export_refused():
    class Refusing(Tensor):
        def untyped_storage(self):
            raise RuntimeError("not shareable")
    assert device._ipc_handle(Refusing(HANDLE)) is None
