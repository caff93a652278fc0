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
from typing import Callable, Dict, Iterable, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .errors import EngineError

DTYPES: Dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
NAMES: Dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}
ITEM_SIZE: Dict[str, int] = {k: torch.empty((), dtype=v).element_size() for k, v in DTYPES.items()}
MAX_HEADER = 100 * 1024 * 1024


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


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
        if not all(_is_int(s) and 0 <= s <= data_len for s in shape):
            raise _fail(source, f"tensor {name!r}: shape {shape} must be non-negative integers "
                                f"no larger than the {data_len} data bytes")
        if not all(_is_int(o) for o in offs):
            raise _fail(source, f"tensor {name!r}: data_offsets {offs} must be integers")
        numel = 1
        for s in shape:
            numel *= s
        want = numel * ITEM_SIZE[info["dtype"]]
        begin, end = offs
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


def entries(buf, source: str = "<bytes>") -> Tuple[Dict[str, str], Dict[str, Tuple[Tensor, int]]]:
    """The `__metadata__` map and every tensor (a view into buf) with the offset of its
    bytes in buf, from one parse of the header."""
    header, start = parse_header(buf, source)
    return (dict(header.get("__metadata__") or {}),
            {k: (_tensor(buf, start, v), start + v["data_offsets"][0]) for k, v in header.items() if k != "__metadata__"})


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


def _header(specs: Sequence[Tuple[str, torch.dtype, Sequence[int]]], meta: Optional[Dict[str, str]]
            ) -> Tuple[bytes, int]:
    """The length-prefixed, 8-byte padded header for tensors laid out in order; returns
    (header bytes, total data bytes)."""
    header: Dict[str, object] = {}
    if meta:
        header["__metadata__"] = {str(k): str(v) for k, v in meta.items()}
    offset = 0
    for name, dtype, shape in specs:
        if dtype not in NAMES:
            raise EngineError("bad_safetensors", f"tensor {name!r}: dtype {dtype} cannot be stored")
        numel = 1
        for d in shape:
            numel *= int(d)
        size = numel * ITEM_SIZE[NAMES[dtype]]
        header[name] = {"dtype": NAMES[dtype], "shape": [int(d) for d in shape],
                        "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)  # keep tensor data 8-byte aligned, as the reference writer does
    return struct.pack("<Q", len(head)) + head, offset


def _write_tensor(f, t: Tensor) -> None:
    """Write a tensor's little-endian bytes without an intermediate bytes copy."""
    t = t.detach()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    if t.numel() == 0:
        return
    flat = t.reshape(-1).contiguous().cpu()
    f.write(memoryview(flat.view(torch.uint8).numpy()))


def serialized_size(tensors: Dict[str, Tensor], meta: Optional[Dict[str, str]] = None) -> int:
    """Bytes `serialize` would make of these tensors (header included), without making them."""
    head, total = _header([(n, t.dtype, t.shape) for n, t in tensors.items()], meta)
    return len(head) + total


def serialize(tensors: Dict[str, Tensor], meta: Optional[Dict[str, str]] = None) -> bytearray:
    """One safetensors file as bytes, tensors in the given order (for in-memory blobs)."""
    head, _ = _header([(n, t.dtype, t.shape) for n, t in tensors.items()], meta)
    # One allocation, each tensor copied once into its slice (a join would copy every byte twice).
    sizes = [t.numel() * t.element_size() for t in tensors.values()]
    out = bytearray(len(head) + sum(sizes))
    out[: len(head)] = head
    view, at = torch.frombuffer(out, dtype=torch.uint8), len(head)
    for t, size in zip(tensors.values(), sizes):
        if size:
            src = t.detach()
            src = src.to(torch.uint8) if src.dtype == torch.bool else src
            view[at: at + size].copy_(src.reshape(-1).view(torch.uint8))
        at += size
    return out


def write_file(path: str, specs: Sequence[Tuple[str, torch.dtype, Sequence[int]]],
               produce: Callable[[str], Tensor], meta: Optional[Dict[str, str]] = None) -> int:
    """Write a safetensors file atomically, one tensor at a time: `produce(name)` is called
    in spec order and its result written before the next is asked for, so at most one
    tensor (plus its byte copy) is in memory. Returns the file size in bytes."""
    head, total = _header(specs, meta)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(head)
            for name, dtype, shape in specs:
                t = produce(name)
                if t.dtype != dtype or list(t.shape) != [int(d) for d in shape]:
                    raise EngineError("bad_safetensors", f"tensor {name!r}: produced {t.dtype} {list(t.shape)}, "
                                                         f"header says {dtype} {list(shape)}")
                _write_tensor(f, t)
                del t
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return len(head) + total


def save_file(tensors: Dict[str, Tensor], path: str, meta: Optional[Dict[str, str]] = None) -> int:
    """Write a safetensors file atomically (streamed tensor by tensor); returns its size in bytes."""
    return write_file(path, [(n, t.dtype, t.shape) for n, t in tensors.items()], tensors.__getitem__, meta)
