"""Per-row seeded sampling that does not depend on the rest of the batch.

With one generator per call, row b's draws depend on how many rows came before it
and on how many draws they took, so the same prompt with the same seed samples other
tokens alone than in a batch of 8, or at another position. Here every draw is a pure
function of (row seed, position): the uniform for the token at index `pos` of a row's
sequence (prompt, generated and appended tokens, counted from 0) is a 64-bit hash of
(seed, pos), and the token is the inverse CDF of the row's (temperature, top-p)
distribution at that uniform. Nothing is stateful, so

- a row samples the same tokens alone, in any batch, at any batch position;
- `resume` continues a row's stream for free (positions keep counting), and a row
  resumed after an appended block samples what a fresh `generate` of the whole
  sequence with the same seed would (up to the model's float rounding);
- the per step cost is one vectorised hash of B integers (numpy, exact uint64) plus a
  cumsum and a searchsorted over (B, V) on the device: no Python loop of B
  multinomial calls, no (B, V) random tensor.

The hash is the splitmix64 finaliser (a bijection of 64-bit integers), so for one seed
distinct positions never share a uniform. Top 53 bits -> a double in [0, 1).
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from .errors import EngineError

_MASK = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic is numpy's for arrays)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def check_seeds(seeds: Optional[Sequence[object]], rows: int) -> Optional[List[int]]:
    """The per-row seeds as ints, or a clear bad_request: one per row, each an integer in [0, 2**64)."""
    if seeds is None:
        return None
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__len__"):
        raise EngineError("bad_request", "seeds must be a list of integers, one per row")
    if len(seeds) != rows:
        raise EngineError("bad_request", f"seeds has {len(seeds)} entries but the batch has {rows} rows: "
                                         "pass one seed per row")
    out = []
    for i, s in enumerate(seeds):
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= _MASK:
            raise EngineError("bad_request", f"seeds[{i}] = {s!r}: each seed must be an integer in [0, 2**64)")
        out.append(s)
    return out


def uniforms(seeds: Sequence[int], positions: Sequence[int]) -> np.ndarray:
    """One uniform in [0, 1) per row: a pure function of (seeds[b], positions[b]). (B,) float64."""
    with np.errstate(over="ignore"):
        s = np.array(seeds, dtype=np.uint64)
        p = np.array(positions, dtype=np.uint64)
        z = _mix(_mix(s + _GOLDEN) ^ (p + _GOLDEN))
    return (z >> _S11).astype(np.float64) * (1.0 / (1 << 53))


def inverse_cdf(probs: Tensor, u: Tensor) -> Tensor:
    """Row b's token = the first index whose cumulative mass passes u[b] * (row b's total).
    probs (B, V) unnormalised, >= 0; u (B,) float64 in [0, 1) -> tokens (B,) long.
    A zero-mass token is never chosen (its cumulative equals its predecessor's). The
    cumsum is float64 so that 150k-entry vocabularies do not lose the tail's mass."""
    cdf = probs.double().cumsum(dim=-1)
    target = (u.to(cdf.device, torch.float64) * cdf[:, -1])[:, None]
    idx = torch.searchsorted(cdf, target, right=True)[:, 0]
    return idx.clamp_(max=probs.shape[-1] - 1)


def resolve(row_seeds: List[Optional[int]], active: Sequence[bool], seed: Optional[int],
            seeds: Optional[Sequence[object]], greedy: bool = False) -> Optional[List[int]]:
    """Decide a call's mode and update the session's row seeds in place.

    Returns the per-row seeds to sample with (per-row mode) or None (one generator
    from `seed`, the behaviour before per-row seeds). `seeds` (one per session row)
    replaces the seeds of the rows this call samples; without it, rows continue with
    the seed they last sampled with. A greedy call draws nothing: it only validates
    and stores `seeds`, so mixing seed and seeds cannot be an error there."""
    given = check_seeds(seeds, len(row_seeds))
    if given is not None and seed is not None and not greedy:
        raise EngineError("bad_request", "pass either seed (one for the call) or seeds (one per row), not both")
    if given is not None:
        for b, a in enumerate(active):
            if a:
                row_seeds[b] = given[b]
    if greedy:
        return None
    rows = [b for b, a in enumerate(active) if a]
    seeded = [b for b in rows if row_seeds[b] is not None]
    if not seeded:
        return None
    if seed is not None:
        raise EngineError("bad_request", f"row {seeded[0]} samples from a per-row seed: pass seeds (one per "
                                         "session row) or neither seed nor seeds to continue each row's stream")
    if len(seeded) != len(rows):
        missing = next(b for b in rows if row_seeds[b] is None)
        raise EngineError("bad_request", f"row {missing} has no per-row seed but row {seeded[0]} has: pass seeds "
                                         "(one per session row) to mix them in one call")
    return [s if s is not None else 0 for s in row_seeds]
