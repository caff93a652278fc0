"""Weight publication: bf16 export, sparse patches against the last published bf16,
exact application.

A publication is one or more safetensors blobs, so every blob is self-describing:
- full (the first publication): shards of `name -> bf16 tensor`, metadata
  {format: hearth-full, version, shard, shards}.
- patch: per changed tensor either `name -> bf16` (dense: more than a third of its
  elements changed) or `name:idx -> u8` (sorted flat indices, delta + LEB128 varint)
  plus `name:val -> bf16` (the new values), metadata {format: hearth-patch, version,
  base_version}. Changes are found by comparing bf16 bit patterns, so applying a
  patch reproduces the publisher's bytes exactly (NaN payloads and -0.0 included).

Indices cost ~1-2 bytes each for the 2-4 % of elements AdamW moves per step at small
learning rates, versus 4 bytes for int32 indices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from . import safetensors
from .checkpoint import expected_shapes, split_shards
from .errors import EngineError
from .model import Transformer

IDX, VAL = ":idx", ":val"


def export_bf16(model: Transformer) -> Dict[str, Tensor]:
    """HF-named bf16 copies of the weights, on the model's device (tied lm_head excluded)."""
    state = model.state_dict()
    return {n: state[n].detach().to(torch.bfloat16, copy=True) for n in expected_shapes(model)}


def model_tensors(model: Transformer) -> Dict[str, Tensor]:
    """HF-named live parameter tensors of a model (patch targets)."""
    state = model.state_dict(keep_vars=False)
    return {n: state[n] for n in expected_shapes(model)}


def varint_encode(values: Tensor) -> Tensor:
    """LEB128 bytes (uint8) of non-negative int64 values (n,), vectorised."""
    v = values.to(torch.int64)
    nbytes = torch.ones_like(v)
    for k in range(1, 10):
        nbytes += ((v >> (7 * k)) > 0).to(torch.int64)
    offsets = nbytes.cumsum(0) - nbytes
    out = torch.empty(int(nbytes.sum()), dtype=torch.uint8, device=v.device)
    for k in range(int(nbytes.max()) if v.numel() else 0):
        sel = nbytes > k
        cont = (nbytes[sel] > k + 1).to(torch.int64) << 7
        out[offsets[sel] + k] = (((v[sel] >> (7 * k)) & 0x7F) | cont).to(torch.uint8)
    return out


def varint_decode(buf: Tensor) -> Tensor:
    """Inverse of varint_encode: uint8 (m,) -> int64 (n,)."""
    if buf.numel() == 0:
        return torch.zeros(0, dtype=torch.int64, device=buf.device)
    b = buf.to(torch.int64)
    last = (b & 0x80) == 0
    if not bool(last[-1]):
        raise EngineError("bad_patch", "index stream ends inside a varint")
    ends = last.nonzero()[:, 0]
    starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
    group = torch.cumsum(last.to(torch.int64), 0) - last.to(torch.int64)  # value index per byte
    shift = torch.arange(b.numel(), device=b.device) - starts[group]
    if bool((shift > 9).any()):
        raise EngineError("bad_patch", "varint longer than 10 bytes")
    vals = torch.zeros(ends.numel(), dtype=torch.int64, device=b.device)
    return vals.scatter_add_(0, group, (b & 0x7F) << (7 * shift))


def encode_indices(idx: Tensor) -> Tensor:
    """Sorted flat indices -> varint bytes of their gaps (first one absolute)."""
    return varint_encode(torch.diff(idx, prepend=idx.new_zeros(1)))


def decode_indices(buf: Tensor) -> Tensor:
    """Varint gap bytes -> sorted flat indices (int64)."""
    return varint_decode(buf).cumsum(0)


@dataclass
class PatchStats:
    """What a publication or an application did, for metrics and benchmarks."""

    kind: str = "patch"
    version: int = 0
    tensors: int = 0
    dense: int = 0
    sparse: int = 0
    changed: int = 0
    elements: int = 0
    bytes: int = 0
    seconds: Dict[str, float] = field(default_factory=dict)


def diff_tensors(old: Dict[str, Tensor], new: Dict[str, Tensor], stats: PatchStats) -> Dict[str, Tensor]:
    """Patch entries turning bf16 `old` into bf16 `new` exactly (only changed tensors)."""
    entries: Dict[str, Tensor] = {}
    for name, b in new.items():
        a = old[name]
        stats.elements += b.numel()
        changed = (a.view(torch.int16) != b.view(torch.int16)).reshape(-1)
        idx = changed.nonzero()[:, 0]  # (k,)
        if idx.numel() == 0:
            continue
        stats.tensors += 1
        stats.changed += idx.numel()
        if idx.numel() * 3 > b.numel():
            entries[name] = b
            stats.dense += 1
        else:
            entries[name + IDX] = encode_indices(idx)
            entries[name + VAL] = b.reshape(-1)[idx]
            stats.sparse += 1
    return entries


def _sync(t: Optional[Tensor]) -> None:
    if t is not None and t.is_cuda:
        torch.cuda.synchronize(t.device)


def full_blobs(tensors: Dict[str, Tensor], version: int, max_shard_bytes: int) -> List[bytes]:
    """A full publication: safetensors shards of the bf16 weights."""
    shards = split_shards(tensors, max_shard_bytes)
    return [safetensors.serialize(s, {"format": "hearth-full", "version": str(version),
                                       "shard": str(i), "shards": str(len(shards))})
            for i, s in enumerate(shards)]


class Publisher:
    """Keeps the last published bf16 weights; each publish returns blobs to ship."""

    def __init__(self, max_shard_bytes: int = 1 << 30):
        self.last: Optional[Dict[str, Tensor]] = None
        self.version = 0
        self.max_shard_bytes = max_shard_bytes

    def publish(self, model: Transformer, full: bool = False) -> Tuple[List[bytes], PatchStats]:
        """Full shards the first time (or when `full`: a fresh base), then one patch blob
        against the last publication."""
        t0 = time.perf_counter()
        new = export_bf16(model)
        _sync(next(iter(new.values())))
        t1 = time.perf_counter()
        self.version += 1
        stats = PatchStats(version=self.version)
        if self.last is None or full:
            stats.kind = "full"
            stats.elements = stats.changed = sum(t.numel() for t in new.values())
            stats.tensors = stats.dense = len(new)
            blobs = full_blobs(new, self.version, self.max_shard_bytes)
        else:
            entries = diff_tensors(self.last, new, stats)
            _sync(next(iter(new.values())))
            stats.seconds["diff"] = time.perf_counter() - t1
            blobs = [safetensors.serialize(entries, {"format": "hearth-patch", "version": str(self.version),
                                                     "base_version": str(self.version - 1)})]
        self.last = new
        stats.bytes = sum(len(b) for b in blobs)
        stats.seconds["export"] = t1 - t0
        stats.seconds["total"] = time.perf_counter() - t0
        return blobs, stats


def apply_blob(targets: Dict[str, Tensor], blob, version: Optional[int] = None) -> PatchStats:
    """Apply one full shard or patch blob to `targets` in place (params of any float
    dtype; bf16 values are exact in bf16/fp32). `version` = the holder's current one,
    checked against a patch's base_version when given."""
    t0 = time.perf_counter()
    meta = safetensors.metadata(blob, "publication")
    fmt = meta.get("format")
    if fmt not in ("hearth-full", "hearth-patch"):
        raise EngineError("bad_patch", f"not a hearth publication (format={fmt!r})")
    if fmt == "hearth-patch" and version is not None and str(version) != meta.get("base_version"):
        raise EngineError("bad_patch", f"patch applies to version {meta.get('base_version')}, holder has {version}")
    entries = safetensors.deserialize(blob, "publication")
    stats = PatchStats(kind="full" if fmt == "hearth-full" else "patch", version=int(meta.get("version", 0)))
    with torch.no_grad():
        for key, t in entries.items():
            if key.endswith(VAL):
                continue
            name = key[: -len(IDX)] if key.endswith(IDX) else key
            if name not in targets:
                raise EngineError("bad_patch", f"publication names unknown tensor {name!r}")
            target = targets[name]
            stats.tensors += 1
            if key.endswith(IDX):
                idx = decode_indices(t.to(target.device))
                val = entries.get(name + VAL)
                if val is None or val.numel() != idx.numel():
                    raise EngineError("bad_patch", f"{name}: {idx.numel()} indices but values do not match")
                if idx.numel() and (int(idx[-1]) >= target.numel() or int(idx[0]) < 0):
                    raise EngineError("bad_patch", f"{name}: index out of range for {target.numel()} elements")
                target.view(-1)[idx] = val.to(device=target.device, dtype=target.dtype)
                stats.sparse += 1
                stats.changed += idx.numel()
            else:
                if t.numel() != target.numel():
                    raise EngineError("bad_patch", f"{name}: {list(t.shape)} does not fit {list(target.shape)}")
                target.copy_(t.reshape(target.shape))
                stats.dense += 1
                stats.changed += t.numel()
    _sync(next(iter(targets.values()), None))
    stats.bytes = len(blob)
    stats.seconds["apply"] = time.perf_counter() - t0
    return stats
