"""csiclient — calls feedfs-csi over its unix socket as kubelet does (gRPC,
CSI v1), for test_csi.py.

The requests are written with the field numbers of the CSI spec's csi.proto
(the wire format) by a few lines of protobuf encoding below, independent of
the plugin's Go code; responses are read back into {field number: [values]}.
"""

import grpc


def _varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(num, wt):
    return _varint(num << 3 | wt)


def f_str(num, s):
    b = s.encode() if isinstance(s, str) else s
    return _key(num, 2) + _varint(len(b)) + b


def f_msg(num, body):
    return _key(num, 2) + _varint(len(body)) + body


def f_int(num, v):
    return _key(num, 0) + _varint(v) if v else b""


def f_map(num, d):
    return b"".join(f_msg(num, f_str(1, k) + f_str(2, v)) for k, v in d.items())


def decode(b):
    """{field number: [int or bytes]} of one message."""
    out, i = {}, 0
    while i < len(b):
        key, i = _read_varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(b, i)
        elif wt == 2:
            n, i = _read_varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        out.setdefault(num, []).append(v)
    return out


def _read_varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


# VolumeCapability.AccessMode.Mode
SINGLE_NODE_WRITER, MULTI_NODE_READER_ONLY = 1, 3


def capability(mount_flags=(), mode=MULTI_NODE_READER_ONLY, block=False, fs_type=""):
    """VolumeCapability: block = 1 | mount = 2 {fs_type 1, mount_flags 2}, access_mode = 3 {mode 1}."""
    if block:
        access = f_msg(1, b"")
    else:
        access = f_msg(2, (f_str(1, fs_type) if fs_type else b"") +
                       b"".join(f_str(2, f) for f in mount_flags))
    return access + f_msg(3, f_int(1, mode))


def publish_request(volume_id, target, context, secrets=None, cap=None, readonly=True):
    """NodePublishVolumeRequest: volume_id 1, target_path 4, volume_capability 5,
    readonly 6, secrets 7, volume_context 8."""
    b = b""
    if volume_id is not None:
        b += f_str(1, volume_id)
    if target is not None:
        b += f_str(4, target)
    if cap is not False:
        b += f_msg(5, cap if cap is not None else capability())
    b += f_int(6, 1 if readonly else 0)
    b += f_map(7, secrets or {})
    b += f_map(8, context or {})
    return b


def unpublish_request(volume_id, target):
    """NodeUnpublishVolumeRequest: volume_id 1, target_path 2."""
    b = b""
    if volume_id is not None:
        b += f_str(1, volume_id)
    if target is not None:
        b += f_str(2, target)
    return b


class Client:
    def __init__(self, sock):
        self.channel = grpc.insecure_channel("unix://" + sock)

    def call(self, service, method, body=b"", timeout=120, wait_for_ready=None):
        """The raw response bytes; a failure raises grpc.RpcError (.code())."""
        fn = self.channel.unary_unary("/csi.v1.%s/%s" % (service, method),
                                      request_serializer=lambda b: b,
                                      response_deserializer=lambda b: b)
        return fn(body, timeout=timeout, wait_for_ready=wait_for_ready)

    def future(self, service, method, body=b"", timeout=120):
        fn = self.channel.unary_unary("/csi.v1.%s/%s" % (service, method),
                                      request_serializer=lambda b: b,
                                      response_deserializer=lambda b: b)
        return fn.future(body, timeout=timeout)

    def publish(self, *a, **kw):
        return self.call("Node", "NodePublishVolume", publish_request(*a, **kw))

    def unpublish(self, volume_id, target):
        return self.call("Node", "NodeUnpublishVolume", unpublish_request(volume_id, target))

    def close(self):
        self.channel.close()
