"""Model weights in host memory backed by transparent huge pages.

A tensor torch allocates on CPU lies in 4 KiB pages. On the virtual machines measured
here (docs/results.md) every 4 KiB page costs a TLB miss through the VM's nested page
tables, and that, not the bytes, bounds a pass over the weights: reading a 942 MiB bf16
base from a node's file into a 0.5B model's parameters took 0.4-0.5 s, 0.16 s once the
parameters lay in 2 MiB pages. `pack_weights` moves a model's CPU parameters into one
buffer the kernel is asked to back with huge pages (madvise MADV_HUGEPAGE, honoured
when transparent huge pages are `always` or `madvise`); where the kernel declines,
the buffer is ordinary memory and nothing else changes.
"""

from __future__ import annotations

import ctypes
import mmap
import weakref
from typing import List, Optional, Tuple

import numpy as np
import torch
from torch import nn

HUGE_PAGE = 2 << 20
ALIGN = 64
_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)


def _advise_huge(buf: np.ndarray) -> bool:
    """Asks the kernel to back `buf` (2 MiB aligned) with huge pages; False where it cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.madvise(ctypes.c_void_p(buf.ctypes.data), ctypes.c_size_t(buf.nbytes), _MADV_HUGEPAGE) == 0
    except (OSError, AttributeError):
        return False


# (start, end, weak reference to the owning array) of every buffer pack_weights made;
# is_packed drops the entries whose buffer is gone.
_PACKED: List[Tuple[int, int, "weakref.ref[np.ndarray]"]] = []


def huge_buffer(nbytes: int) -> np.ndarray:
    """`nbytes` of uninitialised host memory starting on a 2 MiB boundary, advised to huge pages."""
    raw = np.empty(nbytes + HUGE_PAGE, dtype=np.uint8)
    start = (-raw.ctypes.data) % HUGE_PAGE
    buf = raw[start: start + nbytes]  # a view: keeps `raw` alive
    _advise_huge(buf)
    return buf


def is_packed(t: torch.Tensor) -> bool:
    """Whether `t` lies in a buffer pack_weights made (and still holds)."""
    at = t.data_ptr()
    _PACKED[:] = [(a, b, r) for a, b, r in _PACKED if r() is not None]
    return any(a <= at < b for a, b, _ in _PACKED)


def pack_weights(model: nn.Module, dtype: Optional[torch.dtype] = None) -> int:
    """Moves every CPU parameter of `model` into one huge-page buffer, its values cast to
    `dtype` when given (a model built in fp32 and wanted in bf16 is converted on the way,
    with no bf16 copy in 4 KiB pages between); tied parameters stay one tensor. Returns
    the bytes of the buffer. Call it before an optimizer is made."""
    params: List[nn.Parameter] = [p for p in model.parameters() if p.device.type == "cpu"]
    spans = [(p.numel() * torch.empty((), dtype=dtype or p.dtype).element_size() + ALIGN - 1) // ALIGN * ALIGN
             for p in params]
    if not params or sum(spans) == 0:
        return 0
    buf = huge_buffer(sum(spans))
    _PACKED.append((buf.ctypes.data, buf.ctypes.data + buf.nbytes, weakref.ref(buf.base if buf.base is not None else buf)))
    at = 0
    with torch.no_grad():
        for p, span in zip(params, spans):
            want = dtype or p.dtype
            n = p.numel() * torch.empty((), dtype=want).element_size()
            t = torch.from_numpy(buf[at: at + n]).view(want).view(p.shape)
            t.copy_(p.data)
            p.data = t
            at += span
    return at
