"""A minimal safetensors reader/writer (standard library + torch).

Format (https://huggingface.co/docs/safetensors): 8-byte little-endian header length N,
N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {..}},
then the raw little-endian tensor bytes; offsets are relative to the end of the header.
Debian bookworm has no python3-safetensors, hence this file. Every structural problem
is an EngineError("bad_safetensors") naming the file and the tensor.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import warnings
from typing import Dict, Iterable, Optional, Tuple

import torch
from torch import Tensor

from .errors import EngineError

DTYPES: Dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
NAMES: Dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}
MAX_HEADER = 100 * 1024 * 1024


def _fail(source: str, message: str) -> EngineError:
    return EngineError("bad_safetensors", f"{source}: {message}")


def parse_header(buf, source: str = "<bytes>") -> Tuple[dict, int]:
    """Validate and return (header dict, data start offset) of a safetensors buffer."""
    size = len(buf)
    if size < 8:
        raise _fail(source, f"file is {size} bytes, too short for a header")
    (n,) = struct.unpack("<Q", bytes(buf[:8]))
    if n > MAX_HEADER or 8 + n > size:
        raise _fail(source, f"header length {n} does not fit in a {size}-byte file (corrupt or truncated)")
    try:
        header = json.loads(bytes(buf[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _fail(source, f"header is not valid JSON: {e}") from e
    if not isinstance(header, dict):
        raise _fail(source, "header is not a JSON object")
    data_len = size - 8 - n
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or info.get("dtype") not in DTYPES:
            raise _fail(source, f"tensor {name!r} has an unknown dtype {info.get('dtype') if isinstance(info, dict) else info!r}")
        shape, offs = info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or not isinstance(offs, list) or len(offs) != 2:
            raise _fail(source, f"tensor {name!r} lacks shape or data_offsets")
        numel = 1
        for s in shape:
            numel *= int(s)
        want = numel * torch.empty((), dtype=DTYPES[info["dtype"]]).element_size()
        begin, end = int(offs[0]), int(offs[1])
        if not 0 <= begin <= end <= data_len or end - begin != want:
            raise _fail(source, f"tensor {name!r}: data_offsets {offs} do not hold {want} bytes "
                                f"within {data_len} data bytes (corrupt or truncated)")
        spans.append((begin, end, name))
    spans.sort()
    for (b0, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise _fail(source, f"tensors {n0!r} and {n1!r} overlap")
    return header, 8 + n


def _tensor(buf, start: int, info: dict) -> Tensor:
    begin, end = info["data_offsets"]
    dtype = DTYPES[info["dtype"]]
    if end == begin:
        return torch.empty(info["shape"], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only buffers are copied below when needed
        raw = torch.frombuffer(buf, dtype=torch.uint8, count=end - begin, offset=start + begin)
    return raw.view(dtype).reshape(info["shape"])


def deserialize(buf, source: str = "<bytes>") -> Dict[str, Tensor]:
    """All tensors of an in-memory safetensors file (views into buf, zero copy)."""
    header, start = parse_header(buf, source)
    return {k: _tensor(buf, start, v) for k, v in header.items() if k != "__metadata__"}


def metadata(buf, source: str = "<bytes>") -> Dict[str, str]:
    """The `__metadata__` string map of a safetensors buffer ({} when absent)."""
    header, _ = parse_header(buf, source)
    return dict(header.get("__metadata__") or {})


def load_file(path: str, names: Optional[Iterable[str]] = None) -> Dict[str, Tensor]:
    """Tensors of a file via copy-on-write mmap (pages load lazily); `names` filters."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise _fail(path, "file is empty")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except OSError as e:
        raise _fail(path, f"cannot open: {e}") from e
    header, start = parse_header(buf, path)
    wanted = set(names) if names is not None else None
    return {k: _tensor(buf, start, v) for k, v in header.items()
            if k != "__metadata__" and (wanted is None or k in wanted)}


def read_header(path: str) -> dict:
    """The validated JSON header of a file, without its metadata entry."""
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(f.fileno()).st_size else b""
    header, _ = parse_header(buf, path)
    return {k: v for k, v in header.items() if k != "__metadata__"}


def tensor_bytes(t: Tensor) -> bytearray:
    """The little-endian bytes of a tensor (copied to CPU)."""
    t = t.detach()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    out = bytearray(t.numel() * t.element_size())
    if out:
        torch.frombuffer(out, dtype=torch.uint8).copy_(t.reshape(-1).view(torch.uint8))
    return out


def serialize(tensors: Dict[str, Tensor], meta: Optional[Dict[str, str]] = None) -> bytes:
    """One safetensors file as bytes, tensors in the given order."""
    header: Dict[str, object] = {}
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    chunks, offset = [], 0
    for name, t in tensors.items():
        if t.dtype not in NAMES:
            raise EngineError("bad_safetensors", f"tensor {name!r}: dtype {t.dtype} cannot be stored")
        data = tensor_bytes(t)
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)  # keep tensor data 8-byte aligned, as the reference writer does
    return b"".join([struct.pack("<Q", len(head)), head, *chunks])


def save_file(tensors: Dict[str, Tensor], path: str, meta: Optional[Dict[str, str]] = None) -> int:
    """Write a safetensors file atomically; returns its size in bytes."""
    data = serialize(tensors, meta)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return len(data)
