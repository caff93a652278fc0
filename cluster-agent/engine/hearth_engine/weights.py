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
import mmap
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from . import safetensors
from .checkpoint import expected_shapes, split_shards
from .errors import EngineError
from .hostmem import is_packed
from .model import Transformer
from .patch_codec import (apply_deltas, decode_indices, encode_deltas, encode_indices,  # noqa: F401 (re-exported)
                          np_deltas, np_patch_chunks, varint_decode, varint_encode)

IDX, VAL, DLT = ":idx", ":val", ":dlt"
# Index bytes of a patch decoded and applied per step on CPU (np_patch_chunks): ~2 MiB of int64 indices.
PATCH_CHUNK_BYTES = 1 << 18


def export_bf16(model: Transformer, into: Optional[Dict[str, Tensor]] = None) -> Dict[str, Tensor]:
    """HF-named bf16 copies of the weights, on the model's device (tied lm_head excluded).

    With `into` (an earlier export of a model of the same names, shapes and device) the
    weights are copied into its tensors and `into` is returned: a re-base then writes
    over memory the process already has instead of new pages (on these machines a new
    page costs more than the copy into it) and never holds two exports at once."""
    state = model.state_dict()
    names = expected_shapes(model)
    if into is not None and _same_layout(into, {n: state[n] for n in names}):
        with torch.no_grad():
            for n in names:
                into[n].copy_(state[n].detach())
        return into
    return {n: state[n].detach().to(torch.bfloat16, copy=True) for n in names}


def _same_layout(held: Dict[str, Tensor], live: Dict[str, Tensor]) -> bool:
    """Whether `held` (bf16 copies) has exactly the names, shapes and devices of `live`."""
    return held.keys() == live.keys() and all(
        h.dtype == torch.bfloat16 and h.shape == t.shape and h.device == t.device and h.is_contiguous()
        for h, t in ((held[n], live[n]) for n in live))


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


def changed_bits(old: np.ndarray, new: np.ndarray, advance: bool,
                 chunk: int = 1 << 16) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where int16 bit patterns `old` (n,) and `new` (n,) differ: sorted flat indices
    (int64) and the old and new patterns there (int16); with `advance`, `old` is brought
    to `new` on the way (only the changed words are written).

    One pass in chunks of 64-bit words (four values each), so a chunk is still in cache
    when its changed words are gathered and written back: at a training step's 2-4 %
    changed values, about a tenth of the words differ, and the search for them (not the
    comparison) is what costs; it runs over a quarter as many mask entries as a
    per-value compare would."""
    n = old.size
    n4 = n & ~3
    ow, nw = old[:n4].view(np.uint64), new[:n4].view(np.uint64)
    mask = np.empty(min(chunk, ow.size), dtype=np.bool_)
    at: List[np.ndarray] = []
    was: List[np.ndarray] = []
    now: List[np.ndarray] = []
    for s in range(0, ow.size, chunk):
        a, b = ow[s: s + chunk], nw[s: s + chunk]
        m = mask[: a.size]
        np.not_equal(a, b, out=m)
        w = np.flatnonzero(m)  # (j,) changed words of this chunk
        if w.size == 0:
            continue
        ox, nx = a[w], b[w]
        if advance:
            a[w] = nx
        ol, nl = ox.view(np.int16), nx.view(np.int16)  # (4j,) their values, in memory order
        p = np.flatnonzero(ol != nl)
        at.append(((w[p >> 2] + s) << 2) + (p & 3))
        was.append(ol[p])
        now.append(nl[p])
    if n4 < n:  # the last n % 4 values, one by one
        p = np.flatnonzero(old[n4:] != new[n4:])
        if p.size:
            at.append(p + n4)
            was.append(old[n4:][p])
            now.append(new[n4:][p])
            if advance:
                old[n4:] = new[n4:]
    if not at:
        return np.zeros(0, np.int64), np.zeros(0, np.int16), np.zeros(0, np.int16)
    return np.concatenate(at), np.concatenate(was), np.concatenate(now)


def diff_tensors(old: Dict[str, Tensor], new: Dict[str, Tensor], stats: PatchStats,
                 advance: bool = False) -> Dict[str, Tensor]:
    """Patch entries turning bf16 `old` into bf16 `new` exactly (only changed tensors).

    A sparse tensor is `name:idx` (varint gaps) + `name:dlt` (varint zigzag bit-pattern
    deltas against `old`); a dense one is the whole bf16 tensor. With `advance`, `old`
    is brought to `new` in place (only the changed values are written), so the caller
    keeps one bf16 copy instead of exporting a fresh one per publication."""
    t0 = time.perf_counter()
    stats.elements += sum(b.numel() for b in new.values())
    cpu = all(t.device.type == "cpu" for t in new.values())

    def one(name: str) -> Tuple[int, Dict[str, Tensor]]:
        a, b = old[name], new[name]
        a16, b16 = a.view(torch.int16).view(-1), b.view(torch.int16).view(-1)
        if cpu:  # numpy on the bit patterns, found, gathered and advanced in one pass
            i, was, now = changed_bits(a16.numpy(), b16.numpy(), advance)
            if i.size == 0:
                return 0, {}
            if i.size * 3 > b.numel():
                return i.size, {name: b}  # old is already advanced; serialized before the model moves again
            return i.size, {name + IDX: encode_indices(torch.from_numpy(i)),
                            name + DLT: encode_deltas(torch.from_numpy(was), torch.from_numpy(now))}
        idx = (a16 != b16).nonzero()[:, 0]
        if idx.numel() == 0:
            return 0, {}
        if idx.numel() * 3 > b.numel():
            if advance:
                a.copy_(b)
            return idx.numel(), {name: b}
        new_bits, old_bits = b16[idx], a16[idx]
        if advance:
            a16[idx] = new_bits
        return idx.numel(), {name + IDX: encode_indices(idx), name + DLT: encode_deltas(old_bits, new_bits)}

    workers = torch.get_num_threads() if cpu else 1
    # numpy releases the GIL in its loops: with more than one engine thread, the tensors are split.
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    try:
        each = pool.map if pool else map
        entries: Dict[str, Tensor] = {}
        for name, (count, part) in zip(new, each(one, list(new))):
            if not count:
                continue
            entries.update(part)
            stats.tensors += 1
            stats.changed += count
            if name in part:
                stats.dense += 1
            else:
                stats.sparse += 1
    finally:
        if pool:
            pool.shutdown()
    stats.seconds["diff"] = time.perf_counter() - t0  # found and encoded in one pass
    stats.seconds["encode"] = 0.0
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


def full_meta(version: int, shard: int, shards: int) -> Dict[str, str]:
    return {"format": "hearth-full", "version": str(version), "shard": str(shard), "shards": str(shards)}


def _publication_dir(out_dir: str) -> str:
    if not isinstance(out_dir, str) or not out_dir or "\0" in out_dir:
        raise EngineError("bad_request", f"out_dir must be a folder path; got {out_dir!r}")
    os.makedirs(out_dir, mode=0o700, exist_ok=True)
    return out_dir


def _bf16_view(model) -> Dict[str, Tensor]:
    """The live weights as bf16: a bf16 model as it is (no copy); others cast per tensor."""
    return {n: (t.detach() if t.dtype == torch.bfloat16 else t.detach().to(torch.bfloat16))
            for n, t in model_tensors(model).items()}


# Writes one blob of a publication (index, entries, metadata) and returns its size in bytes.
BlobWriter = Callable[[int, Dict[str, Tensor], Dict[str, str]], int]


class Publisher:
    """Keeps the last published bf16 weights; each publication is blobs in memory
    (`publish`) or files (`publish_files`)."""

    def __init__(self, max_shard_bytes: int = 1 << 30):
        self.last: Optional[Dict[str, Tensor]] = None
        self.version = 0
        self.max_shard_bytes = max_shard_bytes

    def _publish(self, model, full: bool, write: BlobWriter, keep_last: bool = True) -> PatchStats:
        """Full shards the first time (or when `full`: a fresh base), then one patch blob
        against the last publication; each blob goes to `write` as soon as it is made.
        Without `keep_last` a full publication writes the live tensors and keeps no bf16
        copy (the next one is full again): a publisher whose memory holds one model, not two."""
        t0 = time.perf_counter()
        self.version += 1
        stats = PatchStats(version=self.version)
        if self.last is None or full:
            new = export_bf16(model, into=self.last) if keep_last else _bf16_view(model)
            _sync(next(iter(new.values())))
            t1 = time.perf_counter()
            stats.kind = "full"
            stats.elements = stats.changed = sum(t.numel() for t in new.values())
            stats.tensors = stats.dense = len(new)
            shards = split_shards(new, self.max_shard_bytes)
            stats.bytes = sum(write(i, shard, full_meta(self.version, i, len(shards))) for i, shard in enumerate(shards))
            self.last = new if keep_last else None
        else:
            live = _bf16_view(model)
            t1 = time.perf_counter()
            entries = diff_tensors(self.last, live, stats, advance=True)
            _sync(next(iter(live.values())))
            t2 = time.perf_counter()
            stats.bytes = write(0, entries, {"format": "hearth-patch", "version": str(self.version),
                                             "base_version": str(self.version - 1)})
            stats.seconds["serialize"] = time.perf_counter() - t2
        stats.seconds["export"] = t1 - t0
        stats.seconds["total"] = time.perf_counter() - t0
        return stats

    def publish_files(self, model, full: bool, out_dir: str, emit: Callable[[dict], None],
                      keep_last: bool = True, inline_max: int = 0) -> Tuple[List[Dict[str, object]], PatchStats]:
        """Each blob written to a file in `out_dir` (streamed tensor by tensor: no blob is ever
        whole in memory) and announced with `emit` as soon as it is complete, so the caller
        ships shard i while shard i + 1 is written. A patch of at most `inline_max` bytes
        comes back in the reply instead (`blob`): a step's patch is small, and a file would
        cost a write and a read of it."""
        out_dir = _publication_dir(out_dir)
        files: List[Dict[str, object]] = []

        def write(i: int, entries: Dict[str, Tensor], meta: Dict[str, str]) -> int:
            kind = "full" if meta["format"] == "hearth-full" else "patch"
            if kind == "patch" and safetensors.serialized_size(entries, meta) <= inline_max:
                blob = safetensors.serialize(entries, meta)
                files.append({"blob": blob, "size": len(blob), "shard": i, "version": self.version, "kind": kind})
                return len(blob)
            path = os.path.join(out_dir, f"v{self.version}-{i}.safetensors")
            size = safetensors.save_file(entries, path, meta)
            files.append({"path": path, "size": size, "shard": i, "version": self.version, "kind": kind})
            emit({"file": path, "size": size, "shard": i, "version": self.version, "kind": kind})
            return size

        return files, self._publish(model, full, write, keep_last)

    def publish(self, model: Transformer, full: bool = False) -> Tuple[List[bytes], PatchStats]:
        """Each blob as bytes in memory (small models, tests)."""
        blobs: List[bytes] = []

        def write(i: int, entries: Dict[str, Tensor], meta: Dict[str, str]) -> int:
            blobs.append(safetensors.serialize(entries, meta))
            return len(blobs[-1])

        return blobs, self._publish(model, full, write)


def apply_blob(targets: Dict[str, Tensor], blob, version: Optional[int] = None) -> PatchStats:
    """Apply one full shard or patch blob to `targets` in place (params of any float
    dtype; bf16 values are exact in bf16/fp32). `version` = the holder's current one,
    checked against a patch's base_version when given."""
    return apply_blobs(targets, [blob], version)[0]


def _read_publication(blob, where: str, held: Optional[int]) -> Tuple[Dict[str, Tuple[Tensor, int]], PatchStats]:
    """A blob's entries (views of its bytes, each with its offset in the blob) and its stats
    (kind, version, bytes), its format and base version checked against the version `held`
    before it."""
    meta, entries = safetensors.entries(blob, "publication")
    fmt = meta.get("format")
    if fmt not in ("hearth-full", "hearth-patch"):
        raise EngineError("bad_patch", f"{where}not a hearth publication (format={fmt!r})")
    if fmt == "hearth-patch" and held is not None and str(held) != meta.get("base_version"):
        raise EngineError("bad_patch", f"{where}patch applies to version {meta.get('base_version')}, holder has {held}")
    stats = PatchStats(kind="full" if fmt == "hearth-full" else "patch", version=int(meta.get("version", 0)))
    stats.bytes = len(blob)
    return entries, stats


def _apply_sparse(name: str, target: Tensor, idx_bytes: Tensor, val: Optional[Tensor], dlt: Optional[Tensor]) -> int:
    """One tensor's changes from a patch (indices + new values or bit deltas), in place."""
    if dlt is not None and val is None and target.dtype == torch.bfloat16 and target.device.type == "cpu":
        # In place on the bit patterns, in int16 (the format's wrap-around), a slice of the
        # stream at a time: torch's index_add_ reads, adds and writes each index in one loop
        # (numpy's fancy `+=` gathers, adds and scatters in three passes: 1.7x slower).
        flat, n = target.view(-1).view(torch.int16), 0
        for idx, d in np_patch_chunks(idx_bytes.numpy(), dlt.numpy(), PATCH_CHUNK_BYTES):
            if idx[0] < 0 or idx[-1] >= target.numel():
                raise EngineError("bad_patch", f"{name}: index out of range for {target.numel()} elements")
            flat.index_add_(0, torch.from_numpy(idx), torch.from_numpy(d))
            n += idx.size
        return n
    idx = decode_indices(idx_bytes.to(target.device))
    if (val is None) == (dlt is None) or (val is not None and val.numel() != idx.numel()):
        raise EngineError("bad_patch", f"{name}: {idx.numel()} indices but values do not match")
    if idx.numel() and (int(idx[-1]) >= target.numel() or int(idx[0]) < 0):
        raise EngineError("bad_patch", f"{name}: index out of range for {target.numel()} elements")
    flat = target.view(-1)
    if dlt is not None:  # deltas of bit patterns against the values held (base_version)
        old_bits = flat[idx].to(torch.bfloat16).view(torch.int16)
        val = apply_deltas(old_bits, dlt.to(target.device)).view(torch.bfloat16)
    flat[idx] = val.to(device=target.device, dtype=target.dtype)
    return idx.numel()


def apply_blobs(targets: Dict[str, Tensor], blobs, version: Optional[int] = None,
                files: Optional[List[Optional["_FileAt"]]] = None) -> List[PatchStats]:
    """Apply full shards and patches, in order, to `targets` in place. Every blob's header,
    tensor names and shapes, and the chain of versions (`version` = the holder's before the
    first; None: not checked for the first) are checked before any tensor is written: a
    late joiner handed a base and patches with one missing gets an error, not a model
    half brought forward. `files[i]`, when given, is where blob i lies in a file: a tensor
    held whole is then read from the file straight into a target of its dtype that lies in
    huge pages (copy_into)."""
    work: List[Tuple[PatchStats, List[tuple]]] = []
    held = version
    for i, blob in enumerate(blobs):
        where = f"publication {i + 1} of {len(blobs)}: " if len(blobs) > 1 else ""
        entries, stats = _read_publication(blob, where, held)
        at = files[i] if files else None
        held = stats.version
        ops: List[tuple] = []
        for key, (t, offset) in entries.items():
            if key.endswith(VAL) or key.endswith(DLT):
                continue
            name = key[: -len(IDX)] if key.endswith(IDX) else key
            if name not in targets:
                raise EngineError("bad_patch", f"{where}publication names unknown tensor {name!r}")
            stats.tensors += 1
            if key.endswith(IDX):
                val, dlt = entries.get(name + VAL), entries.get(name + DLT)
                ops.append((name, t, val and val[0], dlt and dlt[0]))
                stats.sparse += 1
            else:
                if t.numel() != targets[name].numel():
                    raise EngineError("bad_patch", f"{where}{name}: {list(t.shape)} does not fit {list(targets[name].shape)}")
                ops.append((name, t, at and at.at(offset)))
                stats.dense += 1
                stats.changed += t.numel()
        work.append((stats, ops))
    with torch.no_grad():
        for stats, ops in work:
            t1 = time.perf_counter()
            for op in ops:
                target = targets[op[0]]
                if len(op) == 3:
                    copy_into(target, op[1].reshape(target.shape), op[2])
                else:
                    stats.changed += _apply_sparse(op[0], target, op[1], op[2], op[3])
            _sync(next(iter(targets.values()), None))
            stats.seconds["apply"] = time.perf_counter() - t1
    return [stats for stats, _ in work]


@dataclass
class _FileAt:
    """Where bytes lie in an open file: `offset` in `fd` (`path` for errors)."""

    fd: int
    offset: int
    path: str

    def at(self, more: int) -> "_FileAt":
        return _FileAt(self.fd, self.offset + more, self.path)

    def read_into(self, dst: Tensor) -> None:
        """The next dst.nbytes bytes into the CPU tensor `dst` (contiguous), with pread:
        the kernel copies from the page cache through its own mapping, 6x faster here than
        a copy out of a user mapping of the file, whose 4 KiB pages each cost a TLB miss
        through the VM's nested page tables (942 MiB: 0.06 s against 0.37 s)."""
        view = memoryview(dst.detach().reshape(-1).view(torch.uint8).numpy())
        done = 0
        while done < len(view):
            got = os.preadv(self.fd, [view[done:]], self.offset + done)
            if got <= 0:
                raise EngineError("bad_patch", f"{self.path}: ends {self.offset + done} bytes in, inside a tensor "
                                               f"(the file was cut short while it was read)")
            done += got


class _Staging:
    """One pinned host buffer, reused, through which a CPU tensor (a view of a mapped
    file) reaches a GPU target: a pageable source would make every copy a slow staged
    copy of its own. Grows to the largest tensor copied; one per process."""

    def __init__(self) -> None:
        self.buf: Optional[Tensor] = None

    def copy(self, target: Tensor, src: Tensor) -> None:
        n = src.numel() * src.element_size()
        if self.buf is None or self.buf.numel() < n:
            self.buf = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        stage = self.buf[:n]
        stage.copy_(src.contiguous().view(-1).view(torch.uint8))
        target.view(-1).view(torch.uint8).copy_(stage, non_blocking=True)
        # The buffer is reused by the next tensor: this copy must be done first.
        torch.cuda.current_stream(target.device).synchronize()


_STAGING = _Staging()


def copy_into(target: Tensor, src: Tensor, file: Optional[_FileAt] = None) -> None:
    """target[...] = src, exactly (bf16 into bf16 or fp32); GPU targets go through the
    pinned staging buffer when the source is a CPU tensor of the same dtype. With `file`
    (where src's bytes lie), a target of src's dtype in a huge-page buffer
    (hostmem.pack_weights) reads them from there: into 4 KiB pages the kernel's copy was
    slower than a copy out of the mapping (1.4 s against 0.48 s for 942 MiB here)."""
    if file is not None and target.dtype == src.dtype and target.is_contiguous() and is_packed(target):
        file.read_into(target)
    elif target.is_cuda and src.device.type == "cpu" and src.dtype == target.dtype:
        _STAGING.copy(target, src)
    else:
        target.copy_(src)


# madvise(MADV_POPULATE_READ) (Linux 5.14+; Python names it only from 3.13): the mapping's
# pages are mapped in one call instead of faulting in one by one as the copy reads them.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform.startswith("linux") else None)


def _populate(mm: mmap.mmap, offset: int, length: int) -> None:
    """Maps in the pages of [offset, offset + length) of `mm` at once. A page fault is
    slow on virtual machines (0.71-0.80 s to copy a mapped 942 MiB tmpfs file into
    tensors here, 0.51-0.58 s with the range populated first); a kernel without the
    advice (EINVAL) faults them in as before."""
    if _MADV_POPULATE_READ is None or length <= 0:
        return
    start = offset - offset % mmap.PAGESIZE
    try:
        mm.madvise(_MADV_POPULATE_READ, start, offset + length - start)
    except (OSError, ValueError):
        pass


def _map_file(path: str, offset: int, length: Optional[int]):
    """`length` bytes at `offset` of `path`: the open file, its read-only mapping
    (populated) and the view of those bytes in it."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise EngineError("bad_patch", f"cannot open publication file {path}: {e}") from e
    try:
        size = os.fstat(f.fileno()).st_size
        length = size - offset if length is None else int(length)
        if offset < 0 or length <= 0 or offset + length > size:
            raise EngineError("bad_patch", f"{path}: {length} bytes at {offset} lie outside its {size} bytes")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except BaseException:
        f.close()
        raise
    _populate(mm, offset, length)
    return f, mm, memoryview(mm)[offset: offset + length]


def apply_sources(targets: Dict[str, Tensor], sources: List[Dict[str, object]],
                  version: Optional[int] = None) -> List[PatchStats]:
    """apply_blobs over `sources` in order, each either {blob} (bytes) or {path, offset?,
    length?} (a node cache's copy, read in place: a tensor held whole goes from the page
    cache straight into a CPU target, the rest is read through a read-only mapping, and
    nothing of a file is copied whole)."""
    opened = []
    try:
        blobs: list = []
        files: List[Optional[_FileAt]] = []
        for src in sources:
            if "blob" in src:
                blobs.append(src["blob"])
                files.append(None)
                continue
            if not isinstance(src.get("path"), str):
                raise EngineError("bad_request", f"each source must be {{blob}} or {{path, offset?, length?}}; got {src!r}")
            length, offset = src.get("length"), int(src.get("offset") or 0)
            opened.append(_map_file(src["path"], offset, None if length is None else int(length)))
            f, _, view = opened[-1]
            blobs.append(view)
            files.append(_FileAt(f.fileno(), offset, src["path"]))
        return apply_blobs(targets, blobs, version, files)
    finally:
        for f, mm, view in opened:
            try:
                view.release()
                mm.close()
            except BufferError:  # a tensor view still holds it: unmapped when the last one goes
                pass
            f.close()
