"""Weight publication: bf16 export, sparse patches against the last published bf16,
exact application.

A publication is one or more safetensors blobs, so every blob is self-describing:
- full (the first publication): shards of `name -> bf16 tensor`, metadata
  {format: hearth-full, version, shard, shards}.
- patch: per changed tensor either `name -> bf16` (dense: more than a third of its
  elements changed) or `name:idx -> u8` (sorted flat indices, delta + LEB128 varint)
  plus `name:dlt -> u8` (per index, the difference of the new bf16 bit pattern from
  the one at base_version, wrapped to 16 bits, zigzag + LEB128), metadata
  {format: hearth-patch, version, base_version}. Changes are found by comparing bf16
  bit patterns and the holder adds the exact bit differences, so applying a patch to
  base_version reproduces the publisher's bytes exactly (NaN payloads and -0.0
  included). `name:val -> bf16` (raw new values) is still read.

An AdamW step at small learning rates moves 2-4 % of the bf16 values, almost all by
one unit in the last place: ~1 byte per index (gaps below 128) plus ~1 byte per
value, against 4 + 2 bytes for int32 indices and raw bf16 values.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from . import safetensors
from .checkpoint import expected_shapes, split_shards
from .errors import EngineError
from .model import Transformer
from .patch_codec import (apply_deltas, decode_indices, encode_deltas, encode_indices,  # noqa: F401 (re-exported)
                          varint_decode, varint_encode)

IDX, VAL, DLT = ":idx", ":val", ":dlt"


def export_bf16(model: Transformer) -> Dict[str, Tensor]:
    """HF-named bf16 copies of the weights, on the model's device (tied lm_head excluded)."""
    state = model.state_dict()
    return {n: state[n].detach().to(torch.bfloat16, copy=True) for n in expected_shapes(model)}


def model_tensors(model: Transformer) -> Dict[str, Tensor]:
    """HF-named live parameter tensors of a model (patch targets)."""
    state = model.state_dict(keep_vars=False)
    return {n: state[n] for n in expected_shapes(model)}


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


def changed_indices(a: Tensor, b: Tensor, chunk: int = 1 << 20) -> Tensor:
    """Sorted flat indices (int64) where int16 bit patterns a (n,) and b (n,) differ.

    On CPU, in chunks through one reused mask: a whole-tensor mask (136 M bools for a
    0.5B model's embedding) is fresh memory every call, and faulting it in costs more
    than the comparison."""
    if a.device.type != "cpu":
        return (a != b).nonzero()[:, 0]
    an, bn = a.numpy(), b.numpy()
    mask = np.empty(min(chunk, an.size), dtype=np.bool_)
    parts = []
    for s in range(0, an.size, chunk):
        m = mask[: min(an.size, s + chunk) - s]
        np.not_equal(an[s: s + m.size], bn[s: s + m.size], out=m)
        nz = np.flatnonzero(m)
        if nz.size:
            parts.append(nz + s)
    return torch.from_numpy(np.concatenate(parts)) if parts else torch.zeros(0, dtype=torch.int64)


def diff_tensors(old: Dict[str, Tensor], new: Dict[str, Tensor], stats: PatchStats,
                 advance: bool = False) -> Dict[str, Tensor]:
    """Patch entries turning bf16 `old` into bf16 `new` exactly (only changed tensors).

    A sparse tensor is `name:idx` (varint gaps) + `name:dlt` (varint zigzag bit-pattern
    deltas against `old`); a dense one is the whole bf16 tensor. With `advance`, `old`
    is brought to `new` in place (only the changed values are written), so the caller
    keeps one bf16 copy instead of exporting a fresh one per publication."""
    t0 = time.perf_counter()
    stats.elements += sum(b.numel() for b in new.values())

    def find(name: str) -> Tensor:
        return changed_indices(old[name].view(torch.int16).view(-1), new[name].view(torch.int16).view(-1))  # (k,)

    def encode(item: Tuple[str, Tensor]) -> Dict[str, Tensor]:
        name, idx = item
        a, b = old[name], new[name]
        if idx.numel() * 3 > b.numel():
            if advance:
                a.copy_(b)
            return {name: b}  # serialized before the model moves again
        a16, b16 = a.view(torch.int16).view(-1), b.view(torch.int16).view(-1)
        if a16.device.type == "cpu":  # numpy's gather and scatter on the bit patterns: no bf16 kernels
            an, i = a16.numpy(), idx.numpy()
            new_bits, old_bits = torch.from_numpy(b16.numpy()[i]), torch.from_numpy(an[i])
            if advance:
                an[i] = new_bits.numpy()
        else:
            new_bits, old_bits = b16[idx], a16[idx]
            if advance:
                a16[idx] = new_bits
        return {name + IDX: encode_indices(idx), name + DLT: encode_deltas(old_bits, new_bits)}

    workers = torch.get_num_threads() if all(t.device.type == "cpu" for t in new.values()) else 1
    # numpy releases the GIL in its loops: with more than one engine thread, the tensors are split.
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    try:
        each = pool.map if pool else map
        found = [(n, i) for n, i in zip(new, each(find, list(new))) if i.numel()]
        t1 = time.perf_counter()
        entries: Dict[str, Tensor] = {}
        for (name, idx), part in zip(found, each(encode, found)):
            entries.update(part)
            stats.tensors += 1
            stats.changed += idx.numel()
            if name in part:
                stats.dense += 1
            else:
                stats.sparse += 1
    finally:
        if pool:
            pool.shutdown()
    stats.seconds["diff"] = t1 - t0
    stats.seconds["encode"] = time.perf_counter() - t1
    return entries


def perturb_bf16(model: Transformer, share: float, seed: int, dense: Optional[str] = None,
                 dense_share: float = 0.4) -> Dict[str, int]:
    """A simulated optimizer step for benchmarks and tests: in every tensor about `share`
    of the values (`dense_share` in the tensor named `dense`) move by one bf16 unit in the
    last place, up or down at random, as AdamW at small learning rates moves them (the
    fp32 master crosses one bf16 rounding boundary). Zeros move up (never to NaN)."""
    g = torch.Generator().manual_seed(seed)
    touched = 0
    with torch.no_grad():
        for name, t in model_tensors(model).items():
            # k uniform draws with repeats hit a share 1 - exp(-k/n) of the values: draw enough for `share`.
            k = int(round(-math.log1p(-min(dense_share if name == dense else share, 0.99)) * t.numel()))
            if k == 0:
                continue
            idx = torch.randint(t.numel(), (k,), generator=g).to(t.device)
            flat = t.view(-1)
            bits = flat[idx].to(torch.bfloat16).view(torch.int16)
            step = (torch.randint(0, 2, (k,), generator=g, dtype=torch.int16) * 2 - 1).to(t.device)
            step = torch.where((bits & 0x7FFF) == 0, torch.ones_like(step), step)
            flat[idx] = (bits + step).view(torch.bfloat16).to(t.dtype)
            touched += k
    return {"touched": touched}


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
        self.version += 1
        stats = PatchStats(version=self.version)
        if self.last is None or full:
            new = export_bf16(model)
            _sync(next(iter(new.values())))
            t1 = time.perf_counter()
            stats.kind = "full"
            stats.elements = stats.changed = sum(t.numel() for t in new.values())
            stats.tensors = stats.dense = len(new)
            blobs = full_blobs(new, self.version, self.max_shard_bytes)
            self.last = new
        else:
            # A bf16 model is compared as it is (no export copy); others are cast per tensor.
            live = {n: (t.detach() if t.dtype == torch.bfloat16 else t.detach().to(torch.bfloat16))
                    for n, t in model_tensors(model).items()}
            t1 = time.perf_counter()
            entries = diff_tensors(self.last, live, stats, advance=True)
            _sync(next(iter(live.values())))
            t2 = time.perf_counter()
            blobs = [safetensors.serialize(entries, {"format": "hearth-patch", "version": str(self.version),
                                                     "base_version": str(self.version - 1)})]
            stats.seconds["serialize"] = time.perf_counter() - t2
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
            if key.endswith(VAL) or key.endswith(DLT):
                continue
            name = key[: -len(IDX)] if key.endswith(IDX) else key
            if name not in targets:
                raise EngineError("bad_patch", f"publication names unknown tensor {name!r}")
            target = targets[name]
            stats.tensors += 1
            if key.endswith(IDX):
                idx = decode_indices(t.to(target.device))
                val, dlt = entries.get(name + VAL), entries.get(name + DLT)
                if (val is None) == (dlt is None) or (val is not None and val.numel() != idx.numel()):
                    raise EngineError("bad_patch", f"{name}: {idx.numel()} indices but values do not match")
                if idx.numel() and (int(idx[-1]) >= target.numel() or int(idx[0]) < 0):
                    raise EngineError("bad_patch", f"{name}: index out of range for {target.numel()} elements")
                flat = target.view(-1)
                if dlt is not None and target.dtype == torch.bfloat16 and target.device.type == "cpu":
                    # In place on the bit patterns: one gather, one scatter, no casts.
                    bits16, at = flat.view(torch.int16).numpy(), idx.numpy()
                    bits16[at] = apply_deltas(torch.from_numpy(bits16[at]), dlt).numpy()
                else:
                    if dlt is not None:  # deltas of bit patterns against the values held (base_version)
                        old_bits = flat[idx].to(torch.bfloat16).view(torch.int16)
                        val = apply_deltas(old_bits, dlt.to(target.device)).view(torch.bfloat16)
                    flat[idx] = val.to(device=target.device, dtype=target.dtype)
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
