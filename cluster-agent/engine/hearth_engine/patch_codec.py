"""The byte codec of weight patches: LEB128 varints of non-negative integers, sorted
indices as varint gaps, and bf16 bit-pattern deltas as zigzag varints.

On CPU every step runs in numpy (several times faster than torch 1.13's CPU kernels
on the 10^7-element arrays of a 0.5B model's patch, and it releases the GIL so the
publisher can split tensors over threads); on CUDA the same steps run in torch.
"""

from __future__ import annotations

from typing import List

import numpy as np
import torch
from torch import Tensor

from .errors import EngineError


def _np_varint_encode(v: np.ndarray) -> np.ndarray:
    """varint_encode on a CPU array of non-negative integers (any integer dtype).

    Every value's first byte comes from one cast of the whole array (the values that
    fit one byte, almost all of a training step's gaps and deltas, are then done);
    the few values of two or more bytes get their continuation bytes computed on
    their own and inserted after their first byte (np.insert: one masked copy of the
    bytes, no int64 offsets for every value). 3x the cumsum-of-lengths layout on a
    0.5B embedding's gaps at 2.7 %."""
    if v.size == 0:
        return np.zeros(0, dtype=np.uint8)
    big = np.flatnonzero(v >= 0x80)  # (j,)
    first = v.astype(np.uint8)  # the low byte of every value (a cast wraps)
    if big.size == 0:
        return first
    first &= 0x7F
    first[big] |= 0x80
    vb = v[big].astype(np.int64)
    nbb = np.ones(big.size, dtype=np.int64)  # bytes of each big value
    for k in range(1, (int(vb.max()).bit_length() + 6) // 7):
        nbb += vb >= (1 << (7 * k))
    extra = nbb - 1  # (j,) continuation bytes each, >= 1
    own = np.repeat(np.arange(big.size), extra)  # (m,) the big value of each continuation byte
    k = np.arange(own.size) - np.repeat(np.cumsum(extra) - extra, extra) + 1  # its place in its value, 1..
    byte = ((vb[own] >> (7 * k)) & 0x7F) | ((k < nbb[own] - 1).astype(np.int64) << 7)
    # Inserted in order before the next value's first byte: a value's bytes stay together and in order.
    return np.insert(first, big[own] + 1, byte.astype(np.uint8))


def _np_varint_decode(b: np.ndarray) -> np.ndarray:
    """varint_decode on a CPU uint8 array (checked like the torch one).

    Works from the continuation bytes, which are few at a training step's change
    rates: every value starts as its last byte, then the values that have
    continuation bytes are shifted and get those bytes added."""
    cont = b >= 0x80
    c = np.flatnonzero(cont)  # (j,) positions of continuation bytes
    if c.size == 0:
        return b.astype(np.int64)
    vals = b[~cont].astype(np.int64)  # (n,) each value's last byte
    owner = c - np.arange(c.size)  # value index of each continuation byte
    # Position of each continuation byte inside its value: its rank in the run of equal owners.
    first = np.ones(c.size, dtype=bool)
    first[1:] = owner[1:] != owner[:-1]
    run_start = np.flatnonzero(first)
    counts = np.diff(np.append(run_start, c.size))  # continuation bytes per multi-byte value
    if int(counts.max()) > 9:
        raise EngineError("bad_patch", "varint longer than 10 bytes")
    pos = np.arange(c.size) - np.repeat(run_start, counts)
    vals[owner[run_start]] <<= 7 * counts
    low = (b[c] & 0x7F).astype(np.int64) << (7 * pos)
    for k in range(int(counts.max())):  # one byte position at a time: owners are unique within one
        at = np.flatnonzero(pos == k) if k else run_start
        vals[owner[at]] |= low[at]
    return vals


def varint_encode(values: Tensor) -> Tensor:
    """LEB128 bytes (uint8) of non-negative int64 values (n,), vectorised.

    Every value's first byte is written in one pass over all values; later bytes only
    for the values that need them, found by narrowing one index set (at the change
    rates of a training step almost every gap fits one byte, so the later passes
    touch a few percent of the values)."""
    v = values.to(torch.int64)
    if v.device.type == "cpu":
        return torch.from_numpy(_np_varint_encode(v.numpy()))
    if v.numel() == 0:
        return torch.zeros(0, dtype=torch.uint8, device=v.device)
    nbytes = torch.ones_like(v)
    rest = (v >> 7).nonzero()[:, 0]  # values with a second byte
    later: List[Tensor] = []
    while rest.numel():
        later.append(rest)
        nbytes[rest] += 1
        rest = rest[(v[rest] >> (7 * (len(later) + 1))) > 0]
    offsets = nbytes.cumsum(0) - nbytes
    out = torch.empty(int(offsets[-1] + nbytes[-1]), dtype=torch.uint8, device=v.device)
    out[offsets] = ((v & 0x7F) | ((nbytes > 1).to(torch.int64) << 7)).to(torch.uint8)
    for k, sel in enumerate(later, start=1):
        cont = (nbytes[sel] > k + 1).to(torch.int64) << 7
        out[offsets[sel] + k] = (((v[sel] >> (7 * k)) & 0x7F) | cont).to(torch.uint8)
    return out


def varint_decode(buf: Tensor) -> Tensor:
    """Inverse of varint_encode: uint8 (m,) -> int64 (n,)."""
    if buf.numel() == 0:
        return torch.zeros(0, dtype=torch.int64, device=buf.device)
    if int(buf[-1]) & 0x80:
        raise EngineError("bad_patch", "index stream ends inside a varint")
    if buf.device.type == "cpu":
        return torch.from_numpy(_np_varint_decode(buf.numpy()))
    cont = buf >= 0x80  # (m,) bool
    if not bool(cont.any()):  # every value is one byte: the common case of small gaps
        return buf.to(torch.int64)
    b = buf.to(torch.int64)
    last = ~cont
    ends = last.nonzero()[:, 0]
    starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
    group = torch.cumsum(last.to(torch.int64), 0) - last.to(torch.int64)  # value index per byte
    shift = torch.arange(b.numel(), device=b.device) - starts[group]
    if bool((shift > 9).any()):
        raise EngineError("bad_patch", "varint longer than 10 bytes")
    vals = torch.zeros(ends.numel(), dtype=torch.int64, device=b.device)
    return vals.scatter_add_(0, group, (b & 0x7F) << (7 * shift))


def _np_zigzag16(d: np.ndarray) -> np.ndarray:
    """int16 differences -> their zigzag codes (uint16), with no widening."""
    return ((d << 1) ^ (d >> 15)).view(np.uint16)


def _np_unzigzag16(z: np.ndarray) -> np.ndarray:
    """Zigzag codes (any integer dtype) -> int16 differences, wrapped to 16 bits."""
    if z.dtype == np.uint8:  # one-byte codes: the common case, no int64 arrays at all
        return (z >> 1).astype(np.int16) ^ -(z & 1).astype(np.int16)
    return ((z >> 1) ^ -(z & 1)).astype(np.int16)


def _np_decode_small(b: np.ndarray) -> np.ndarray:
    """varint bytes -> values; the bytes themselves (uint8) when none continues."""
    c = b >= 0x80
    return b if not c.any() else _np_varint_decode(b)


def np_encode_deltas(old_bits: np.ndarray, new_bits: np.ndarray) -> np.ndarray:
    """encode_deltas on numpy int16 arrays: the difference wraps in int16 as the format
    wants, so the only wide array is none."""
    return _np_varint_encode(_np_zigzag16(new_bits - old_bits))


def np_deltas(buf: np.ndarray, count: int) -> np.ndarray:
    """Delta bytes -> int16 differences (count of them), checked."""
    if buf.size and int(buf[-1]) & 0x80:
        raise EngineError("bad_patch", "delta stream ends inside a varint")
    d = _np_unzigzag16(_np_decode_small(buf))
    if d.size != count:
        raise EngineError("bad_patch", f"{count} indices but {d.size} value deltas")
    return d


def np_decode_indices(buf: np.ndarray) -> np.ndarray:
    """Varint gap bytes (uint8) -> sorted flat indices (int64)."""
    if buf.size and int(buf[-1]) & 0x80:
        raise EngineError("bad_patch", "index stream ends inside a varint")
    return np.cumsum(_np_decode_small(buf), dtype=np.int64)


def _np_values(buf: np.ndarray, step: int = 1 << 22) -> int:
    """How many varints `buf` holds (its bytes without the continuation flag), counted a
    slice at a time (no array of the whole buffer's size)."""
    return sum(int(np.count_nonzero(buf[i: i + step] < 0x80)) for i in range(0, buf.size, step))


def np_patch_chunks(idx_buf: np.ndarray, dlt_buf: np.ndarray, chunk: int = 1 << 18):
    """A tensor's patch entries (index gap bytes, delta bytes) -> (sorted flat indices
    int64, int16 differences), `chunk` index bytes at a time: the arrays stay the size of
    a cache and are reused by the allocator, where decoding a 0.5B embedding's 10 % whole
    wrote ~300 MB of arrays into pages the process never had. The streams' ends and
    counts are checked before the first chunk."""
    if idx_buf.size and int(idx_buf[-1]) & 0x80:
        raise EngineError("bad_patch", "index stream ends inside a varint")
    if dlt_buf.size and int(dlt_buf[-1]) & 0x80:
        raise EngineError("bad_patch", "delta stream ends inside a varint")
    count, codes = _np_values(idx_buf), _np_values(dlt_buf)
    if count != codes:
        raise EngineError("bad_patch", f"{count} indices but {codes} value deltas")
    # One byte per delta (a training step's +-1-ulp moves) is sliced as it goes; otherwise decoded whole.
    deltas = None if codes == dlt_buf.size else _np_unzigzag16(_np_varint_decode(dlt_buf))
    at, done, last = 0, 0, np.int64(0)
    while at < idx_buf.size:
        end = min(at + chunk, idx_buf.size)
        while idx_buf[end - 1] & 0x80:  # a varint ends where a byte has no continuation flag
            end += 1
        idx = np.cumsum(_np_decode_small(idx_buf[at:end]), dtype=np.int64)
        idx += last
        k = idx.size
        d = _np_unzigzag16(dlt_buf[done: done + k]) if deltas is None else deltas[done: done + k]
        yield idx, d
        last, done, at = idx[-1], done + k, end


def encode_deltas(old_bits: Tensor, new_bits: Tensor) -> Tensor:
    """int16 bit patterns (k,) -> varint bytes of the zigzagged wrapped differences.

    A bf16 value that an optimizer step moves usually moves by one unit in the last
    place, so its bit pattern changes by +-1: one byte instead of two raw."""
    if new_bits.device.type == "cpu":
        return torch.from_numpy(np_encode_deltas(old_bits.numpy(), new_bits.numpy()))
    d = new_bits.to(torch.int32) - old_bits.to(torch.int32)
    d = ((d + 32768) & 0xFFFF) - 32768  # wrap to [-32768, 32767]
    return varint_encode(((d << 1) ^ (d >> 31)).to(torch.int64))


def apply_deltas(old_bits: Tensor, buf: Tensor) -> Tensor:
    """Inverse of encode_deltas: old int16 bit patterns (k,) + varint bytes -> new int16 (k,)."""
    if buf.device.type == "cpu":
        return torch.from_numpy(old_bits.numpy() + np_deltas(buf.numpy(), old_bits.numel()))
    z = varint_decode(buf)
    if z.numel() != old_bits.numel():
        raise EngineError("bad_patch", f"{old_bits.numel()} indices but {z.numel()} value deltas")
    d = (z >> 1) ^ -(z & 1)
    new = ((old_bits.to(torch.int64) + d + 32768) & 0xFFFF) - 32768
    return new.to(torch.int16)


def encode_indices(idx: Tensor) -> Tensor:
    """Sorted flat indices -> varint bytes of their gaps (first one absolute)."""
    if idx.device.type == "cpu":
        return torch.from_numpy(_np_varint_encode(np.diff(idx.numpy(), prepend=0)))
    return varint_encode(torch.diff(idx, prepend=idx.new_zeros(1)))


def decode_indices(buf: Tensor) -> Tensor:
    """Varint gap bytes -> sorted flat indices (int64)."""
    if buf.device.type == "cpu":
        return torch.from_numpy(np_decode_indices(buf.numpy()))
    return varint_decode(buf).cumsum(0)
