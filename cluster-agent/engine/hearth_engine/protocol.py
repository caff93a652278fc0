"""Pipe framing between the TypeScript TensorEngine and this process.

One frame = u32 little-endian header length, a UTF-8 JSON header, then the raw
payloads whose byte sizes the header lists in "sizes". Inside the JSON, a payload
is referenced as {"$bytes": i} (raw bytes) or {"$tensor": i, "dtype": "int32",
"shape": [2, 3]} (little-endian, row-major). Tensors are never re-encoded.

Requests: {"id", "op", "args", "sizes"}. Replies: {"id", "ok": true, "result",
"sizes"} or {"id", "ok": false, "error": {"code", "message", "type", "traceback"}}.
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO, List, Optional, Tuple

import torch
from torch import Tensor

from .errors import EngineError
from .safetensors import tensor_bytes

MAX_HEADER = 64 * 1024 * 1024
# The payload bytes one frame may announce: sizes come from the other process
# and are checked before anything is allocated for them.
MAX_PAYLOAD = 1 << 36
DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float64": torch.float64, "int64": torch.int64, "int32": torch.int32,
    "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}


def read_exact(stream: BinaryIO, n: int) -> Optional[bytearray]:
    """Exactly n bytes, or None at a clean end of stream before the first byte."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        chunk = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not chunk:
            if got == 0:
                return None
            raise EngineError("bad_request", f"stream ended after {got} of {n} bytes")
        got += chunk
    return buf


def read_frame(stream: BinaryIO) -> Optional[Tuple[dict, List[bytearray]]]:
    """The next (header, payloads), or None at end of input."""
    head = read_exact(stream, 4)
    if head is None:
        return None
    (n,) = struct.unpack("<I", head)
    if n > MAX_HEADER:
        raise EngineError("bad_request", f"header of {n} bytes exceeds {MAX_HEADER}")
    raw = read_exact(stream, n) if n else bytearray()
    if raw is None:
        raise EngineError("bad_request", "stream ended inside a header")
    header = json.loads(raw.decode("utf-8"))
    sizes = header.get("sizes", []) if isinstance(header, dict) else None
    if not isinstance(sizes, list):
        raise EngineError("bad_request", "a frame header is not an object with a list of sizes")
    total = 0
    for i, size in enumerate(sizes):
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise EngineError("bad_request", f"payload {i} of a frame has size {size!r}; a size is a non-negative integer")
        total += size
        if total > MAX_PAYLOAD:
            raise EngineError("bad_request", f"a frame announces {total} payload bytes, over the limit of {MAX_PAYLOAD}")
    payloads = []
    for size in sizes:
        data = read_exact(stream, size) if size else bytearray()
        if data is None:
            raise EngineError("bad_request", "stream ended inside a payload")
        payloads.append(data)
    return header, payloads


def write_frame(stream: BinaryIO, header: dict, payloads: List[Any]) -> None:
    """Write one frame and flush."""
    header = {**header, "sizes": [len(p) for p in payloads]}
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    stream.write(struct.pack("<I", len(raw)))
    stream.write(raw)
    for p in payloads:
        stream.write(p)
    stream.flush()


def decode_value(obj: Any, payloads: List[bytearray]) -> Any:
    """Replace payload references in a decoded JSON value by bytes / CPU tensors."""
    if isinstance(obj, dict):
        if "$tensor" in obj:
            dtype = DTYPES.get(obj.get("dtype", ""))
            if dtype is None:
                raise EngineError("bad_request", f"unknown tensor dtype {obj.get('dtype')!r}")
            data = payloads[int(obj["$tensor"])]
            shape = [int(s) for s in obj["shape"]]
            numel = 1
            for s in shape:
                numel *= s
            if numel * torch.empty((), dtype=dtype).element_size() != len(data):
                raise EngineError("bad_request", f"tensor {shape} {obj['dtype']} does not match {len(data)} bytes")
            if numel == 0:
                return torch.zeros(shape, dtype=dtype)
            return torch.frombuffer(data, dtype=torch.uint8).view(dtype).reshape(shape)
        if "$bytes" in obj:
            return payloads[int(obj["$bytes"])]
        return {k: decode_value(v, payloads) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_value(v, payloads) for v in obj]
    return obj


def encode_value(obj: Any, payloads: List[Any]) -> Any:
    """Replace tensors / bytes in a result by payload references (appending payloads)."""
    if isinstance(obj, Tensor):
        if obj.dtype not in NAMES:
            raise EngineError("internal", f"cannot send dtype {obj.dtype}")
        payloads.append(tensor_bytes(obj))
        return {"$tensor": len(payloads) - 1, "dtype": NAMES[obj.dtype], "shape": list(obj.shape)}
    if isinstance(obj, (bytes, bytearray, memoryview)):
        payloads.append(obj)
        return {"$bytes": len(payloads) - 1}
    if isinstance(obj, dict):
        return {k: encode_value(v, payloads) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode_value(v, payloads) for v in obj]
    return obj
