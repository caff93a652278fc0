"""Batched sampling with a static KV cache: prefill, decode, stop strings, resume.

Rows of one batch have their own lengths: row b's tokens occupy cache positions
[0, cached[b]) and every forward writes row b at its own positions (model.KVCache),
so prompts are right-padded and never shifted. A `Session` keeps the cache between
calls: after a row stops (say at "</search>"), the caller appends tokens (the search
result) and `resume` feeds only what the cache lacks, i.e. the row's last sampled
token plus the appended ones, instead of the whole prefix.

Logprobs are those of the model's own distribution (temperature 1, no top-p), the
quantity a trainer recomputes; sampling applies temperature and top-p on top.
With `seeds` (one per row) every draw is a function of (row seed, token position)
only (rowseed.py), so a row samples the same tokens whatever else is in its batch.
On CUDA the one-token decode step is captured once in a CUDA graph and replayed;
sampling runs on the graph's output, outside the graph, in both seed modes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import time

import torch
from torch import Tensor

from . import rowseed
from .errors import EngineError
from .model import KVCache, Transformer


@dataclass
class SamplingParams:
    """Per-call sampling options; temperature 0 means greedy.

    seed: one generator for the whole call (rows depend on each other's draws).
    seeds: one seed per row of the batch (per session row for resume); each row then
    samples from its own counter-based stream (rowseed.py). On resume, rows without
    new seeds continue their own stream."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    seed: Optional[int] = None
    seeds: Optional[Sequence[int]] = None
    stop: Sequence[str] = ()
    eos_token_ids: Sequence[int] = ()
    cuda_graph: bool = True
    # Per generated token, also its top-k alternatives and entropy (replays; 0: none, nothing computed).
    top_logprobs: int = 0


@dataclass
class RowResult:
    """What one call generated for one row. finish_reason: stop | eos | length | idle."""

    tokens: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    finish_reason: str = "idle"
    stop: Optional[str] = None
    # With top_logprobs: per generated token, (top ids, their logprobs, entropy).
    top: List[Tuple[List[int], List[float], float]] = field(default_factory=list)


class Session:
    """A batch's KV cache plus, per row, every token so far and how many are cached."""

    def __init__(self, model: Transformer, batch: int, capacity: int):
        self.model = model
        self.cache: List[KVCache] = model.new_cache(batch, capacity)
        self.tokens: List[List[int]] = [[] for _ in range(batch)]
        self.cached: List[int] = [0] * batch
        # Per-row sampling seed (rowseed.py), None for rows sampled from a call's `seed`.
        self.row_seeds: List[Optional[int]] = [None] * batch
        self.stepper: Optional[DecodeStep] = None
        # Wall-clock seconds of the last call: prefill, decode, decode_steps, graph_capture.
        self.timings: Dict[str, float] = {}

    @property
    def batch(self) -> int:
        """Rows (B)."""
        return len(self.tokens)

    @property
    def capacity(self) -> int:
        """Cache positions per row (S)."""
        return self.cache[0].capacity

    def ensure_capacity(self, needed: int) -> None:
        """Grow the cache (copying it) when a call needs more than S positions."""
        if needed <= self.capacity:
            return
        if needed > self.model.config.max_position_embeddings:
            raise EngineError("bad_request", f"sequence of {needed} tokens exceeds max_position_embeddings")
        grown = self.model.new_cache(self.batch, max(needed, self.capacity * 2))
        for old, new in zip(self.cache, grown):
            new.k[:, :, : old.capacity].copy_(old.k)
            new.v[:, :, : old.capacity].copy_(old.v)
        self.cache, self.stepper = grown, None


class DecodeStep:
    """One decode step, tokens (B,) at positions (B,) -> logits (B, V); replayed from a
    CUDA graph when on CUDA (launch overhead dominates an eager 3B decode step)."""

    def __init__(self, model: Transformer, cache: List[KVCache], use_graph: bool):
        self.model, self.cache = model, cache
        self.graph = None
        self.capture_seconds = 0.0
        self.use_graph = use_graph and model.lm_head.weight.is_cuda and hasattr(torch.cuda, "CUDAGraph")

    def eager(self, tok: Tensor, pos: Tensor) -> Tensor:
        """The step without a graph."""
        return self.model(tok[:, None], pos, self.cache)[:, 0].float()

    def __call__(self, tok: Tensor, pos: Tensor) -> Tensor:
        if not self.use_graph:
            return self.eager(tok, pos)
        if self.graph is None:
            t0 = time.perf_counter()
            self.tok, self.pos = tok.clone(), pos.clone()
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm up: same inputs, so cache writes are idempotent
                for _ in range(2):
                    self.eager(self.tok, self.pos)
            torch.cuda.current_stream().wait_stream(stream)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.logits = self.eager(self.tok, self.pos)
            torch.cuda.synchronize()
            self.capture_seconds = time.perf_counter() - t0
        self.tok.copy_(tok)
        self.pos.copy_(pos)
        self.graph.replay()
        return self.logits


def top_p_filter(probs: Tensor, top_p: float) -> Tensor:
    """Zero all but the smallest set of most likely tokens whose mass reaches top_p.
    probs (B, V) -> (B, V), unnormalised (multinomial does not need normalisation)."""
    sorted_p, idx = probs.sort(dim=-1, descending=True)
    drop = (sorted_p.cumsum(dim=-1) - sorted_p) > top_p  # the first token is always kept
    return torch.zeros_like(probs).scatter_(-1, idx, sorted_p.masked_fill(drop, 0.0))


def sample(logits: Tensor, temperature: float, top_p: float, gen: Optional[torch.Generator]) -> Tensor:
    """Next tokens (B,) from fp32 logits (B, V)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        probs = top_p_filter(probs, top_p)
    return torch.multinomial(probs, 1, generator=gen)[:, 0]


def sample_rows(logits: Tensor, temperature: float, top_p: float, seeds: List[int],
                positions: List[int]) -> Tensor:
    """Next tokens (B,) from fp32 logits (B, V), row b's draw a function of
    (seeds[b], positions[b]) and its own logits only: no shared generator, no loop."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        probs = top_p_filter(probs, top_p)
    return rowseed.inverse_cdf(probs, torch.from_numpy(rowseed.uniforms(seeds, positions)))


def token_logprob(logits: Tensor, tokens: Tensor) -> Tensor:
    """log p(tokens) under the raw model distribution: logits (B, V), tokens (B,) -> (B,)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens[:, None])[:, 0]


class StopMatcher:
    """Finds stop strings in generated bytes, including ones that straddle tokens: each
    row keeps the last (its longest stop - 1) bytes and searches them plus the new token.
    `stops` is one list for every row, or (per_row) one list per row."""

    def __init__(self, vocab: Optional[List[bytes]], stops: Sequence[str], batch: int,
                 per_row: Optional[Sequence[Sequence[str]]] = None):
        lists = [list(r) for r in per_row] if per_row is not None else [list(stops)] * batch
        self.stops = [[(s, s.encode("utf-8")) for s in r if s] for r in lists]
        if any(self.stops) and vocab is None:
            raise EngineError("no_vocab", "stop strings need the vocabulary: send set_vocab first")
        self.vocab = vocab or []
        self.keep = [max((len(b) for _, b in r), default=1) - 1 for r in self.stops]
        self.tail = [b""] * batch

    def push(self, row: int, token: int) -> Optional[str]:
        """Append a token's bytes to a row; return the first stop string now present."""
        stops = self.stops[row]
        if not stops:
            return None
        piece = self.vocab[token] if 0 <= token < len(self.vocab) else b""
        text = self.tail[row] + piece
        keep = self.keep[row]
        self.tail[row] = text[-keep:] if keep else b""
        for s, b in stops:
            if b in text:
                return s
        return None


def _prefill(session: Session, feeds: List[List[int]]) -> Tensor:
    """Run each row's new tokens at its cached offset; logits (B, V) at each row's last."""
    model, B = session.model, session.batch
    device = model.lm_head.weight.device
    width = max(len(f) for f in feeds)
    session.ensure_capacity(max(c + width for c in session.cached))
    tok = torch.zeros(B, width, dtype=torch.long)
    for b, f in enumerate(feeds):
        tok[b, : len(f)] = torch.tensor(f, dtype=torch.long)
    start = torch.tensor(session.cached, dtype=torch.long, device=device)
    last = torch.tensor([max(len(f) - 1, 0) for f in feeds], dtype=torch.long, device=device)
    logits = model(tok.to(device), start, session.cache, logits_at=last).float()  # (B, V)
    for b, f in enumerate(feeds):
        session.cached[b] += len(f)
    return logits


@dataclass
class RowParams:
    """One row's own sampling settings (a batch of rows from different requests):
    what SamplingParams gives the whole call otherwise. top_logprobs > 0 also
    returns, per generated token, the k most likely tokens and the entropy."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    stop: Sequence[str] = ()
    top_logprobs: int = 0
    # Report this row's tokens as they are sampled (run's on_step), for a streamed reply.
    stream: bool = False


def _draw(logits: Tensor, temps: List[float], tops: List[float], gen: Optional[torch.Generator],
          row_seeds: Optional[List[int]], positions: List[int]) -> Tensor:
    """Next tokens (B,): one temperature and top-p for all rows takes the scalar path
    (the environment path's numerics, unchanged); otherwise each row its own, greedy
    rows (temperature 0) taking the argmax."""
    if len(set(temps)) <= 1 and len(set(tops)) <= 1:
        t, p = (temps[0], tops[0]) if temps else (1.0, 1.0)
        if row_seeds is None:
            return sample(logits, t, p, gen)
        return sample_rows(logits, t, p, row_seeds, positions)
    t = torch.tensor([max(x, 1e-6) for x in temps], dtype=logits.dtype, device=logits.device)[:, None]
    probs = torch.softmax(logits / t, dim=-1)
    if any(x < 1.0 for x in tops):
        probs = top_p_filter(probs, torch.tensor(tops, dtype=probs.dtype, device=probs.device)[:, None])
    if row_seeds is None:
        drawn = torch.multinomial(probs, 1, generator=gen)[:, 0]
    else:
        drawn = rowseed.inverse_cdf(probs, torch.from_numpy(rowseed.uniforms(row_seeds, positions)))
    greedy = torch.tensor([x <= 0 for x in temps], device=logits.device)
    return torch.where(greedy, logits.argmax(dim=-1), drawn)


@torch.no_grad()
def run(session: Session, feeds: List[List[int]], params: SamplingParams,
        vocab: Optional[List[bytes]], rows: Optional[List[RowParams]] = None,
        on_step: Optional[Callable[[List[int], List[int]], None]] = None) -> List[RowResult]:
    """Feed each active row its tokens (empty feed = row idle), then sample up to
    max_new_tokens per row until eos, a stop string or the length limit. With `rows`
    each row has its own limit, temperature, top-p, stops and top-k detail; `params`
    then gives only the seeds, the eos ids and the CUDA-graph switch. `on_step(rows,
    tokens)` is told after every step the tokens just sampled by the rows that stream."""
    model, B = session.model, session.batch
    device = model.lm_head.weight.device
    if len(feeds) != B or (rows is not None and len(rows) != B):
        raise EngineError("bad_request", f"expected {B} rows, got {len(feeds)}")
    active = [len(f) > 0 for f in feeds]
    results = [RowResult(finish_reason="idle" if not a else "length") for a in active]
    limits = [r.max_new_tokens for r in rows] if rows is not None else [params.max_new_tokens] * B
    limits = [n if a else 0 for n, a in zip(limits, active)]
    if not any(active) or max(limits) <= 0:
        return results
    temps = [r.temperature for r in rows] if rows is not None else [params.temperature] * B
    tops = [r.top_p for r in rows] if rows is not None else [params.top_p] * B
    details = [r.top_logprobs for r in rows] if rows is not None else [params.top_logprobs] * B
    streams = [r.stream for r in rows] if rows is not None else [False] * B
    # Everything that can refuse the call runs before the session changes.
    matcher = StopMatcher(vocab, params.stop, B, [r.stop for r in rows] if rows is not None else None)
    eos = set(int(t) for t in params.eos_token_ids)
    row_seeds = rowseed.resolve(session.row_seeds, active, params.seed, params.seeds,
                                 greedy=all(t <= 0 for t, a in zip(temps, active) if a))
    for b, f in enumerate(feeds):
        if f:  # a feed starts at the row's first uncached token (see resume)
            del session.tokens[b][session.cached[b]:]
            session.tokens[b].extend(f)
    gen = None
    if row_seeds is None and params.seed is not None and any(t > 0 for t in temps):
        gen = torch.Generator(device=device).manual_seed(int(params.seed))
    t0 = _now(device)
    logits = _prefill(session, feeds)
    t1 = _now(device)
    session.ensure_capacity(max(c + n for c, n in zip(session.cached, limits)))
    if session.stepper is None:
        session.stepper = DecodeStep(model, session.cache, params.cuda_graph)
    done = [n <= 0 for n in limits]
    capture0 = session.stepper.capture_seconds
    kmax = max(details)
    steps = 0
    for step in range(max(limits)):
        # the position of the token being drawn = how many the row has so far
        nxt = _draw(logits, temps, tops, gen, row_seeds, [len(t) for t in session.tokens])  # (B,)
        logp = torch.log_softmax(logits.float(), dim=-1)  # (B, V)
        lp = logp.gather(-1, nxt[:, None])[:, 0].tolist()
        if kmax > 0:
            top_v, top_i = logp.topk(kmax, dim=-1)  # (B, k)
            ent = (-(logp.exp() * logp).nan_to_num().sum(dim=-1)).tolist()
            top_v, top_i = top_v.tolist(), top_i.tolist()
        ids = nxt.tolist()
        streamed = [b for b in range(B) if streams[b] and not done[b]]
        for b in range(B):
            if done[b]:
                continue
            r = results[b]
            r.tokens.append(ids[b])
            r.logprobs.append(lp[b])
            if details[b] > 0:
                r.top.append((top_i[b][: details[b]], top_v[b][: details[b]], ent[b]))
            session.tokens[b].append(ids[b])
            hit = matcher.push(b, ids[b])
            if hit is not None:
                r.finish_reason, r.stop, done[b] = "stop", hit, True
            elif ids[b] in eos:
                r.finish_reason, done[b] = "eos", True
            elif len(r.tokens) >= limits[b]:
                done[b] = True
        if on_step is not None and streamed:
            on_step(streamed, [ids[b] for b in streamed])
        if all(done):
            break
        # Every row writes at its own next position; finished rows rewrite their last
        # slot (re-fed on resume), so positions never run past the cache.
        pos = torch.tensor(session.cached, dtype=torch.long, device=device)
        logits = session.stepper(nxt, pos)
        steps += 1
        for b in range(B):
            if not done[b]:
                session.cached[b] += 1
    session.timings = {"prefill": t1 - t0, "decode": _now(device) - t1, "decode_steps": float(steps),
                       "graph_capture": session.stepper.capture_seconds - capture0}
    return results


def _now(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def generate(model: Transformer, prompts: List[List[int]], params: SamplingParams,
             vocab: Optional[List[bytes]] = None, capacity: Optional[int] = None) -> "tuple[Session, List[RowResult]]":
    """Sample continuations of a batch of prompts; returns the session (for resume)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise EngineError("bad_request", "every prompt needs at least one token")
    vocab_size = model.config.vocab_size
    if any(t < 0 or t >= vocab_size for p in prompts for t in p):
        raise EngineError("bad_request", f"token id out of range [0, {vocab_size})")
    need = max(len(p) for p in prompts) + max(params.max_new_tokens, 1)
    session = Session(model, len(prompts), max(capacity or 0, need))
    return session, run(session, [list(p) for p in prompts], params, vocab)


def resume(session: Session, appended: Dict[int, List[int]], params: SamplingParams,
           vocab: Optional[List[bytes]] = None) -> List[RowResult]:
    """Continue rows in `appended` (row -> tokens the caller adds, may be empty) after
    their previous output; the other rows stay idle. Only uncached tokens are fed."""
    feeds: List[List[int]] = [[] for _ in range(session.batch)]
    vocab_size = session.model.config.vocab_size
    for row, extra in appended.items():
        if not 0 <= row < session.batch:
            raise EngineError("bad_request", f"row {row} not in session of {session.batch}")
        if any(t < 0 or t >= vocab_size for t in extra):
            raise EngineError("bad_request", f"token id out of range [0, {vocab_size})")
        feeds[row] = session.tokens[row][session.cached[row]:] + list(extra)
        if not feeds[row]:
            raise EngineError("bad_request", f"row {row} has nothing to continue from")
    return run(session, feeds, params, vocab)

