"""Batches of rows from different requests (the agent endpoint's): a row is a new prompt,
or the continuation of a row of a kept session whose cached keys and values are copied
into the batch's new session, so only what the cache lacks is fed. Each row samples
with its own seed and settings (generate.RowParams); generate.run does the decoding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

from . import rowseed
from .errors import EngineError
from .generate import RowParams, RowResult, SamplingParams, Session, run
from .model import Transformer


@dataclass
class BatchRow:
    """One row of a batch of rows from different requests: a new prompt (`feed` is
    all of it), or the continuation of row `source[1]` of a kept session (`feed` is
    what the caller appends after the row's tokens, which must number `expect`)."""

    feed: List[int]
    params: RowParams
    seed: int
    source: Optional[Tuple[Session, int]] = None
    expect: int = 0


def compose(model: Transformer, rows: List[BatchRow]) -> "tuple[Session, List[List[int]]]":
    """A new session whose row i is rows[i]: a continued row gets its source row's
    cached keys and values (copied, positions [0, cached)), its tokens and its seed, so
    only what the cache lacks is fed; a new row starts empty. Returns the session and
    each row's feed."""
    if not rows:
        raise EngineError("bad_request", "a batch needs at least one row")
    vocab_size = model.config.vocab_size
    need = 1
    for i, r in enumerate(rows):
        if any(t < 0 or t >= vocab_size for t in r.feed):
            raise EngineError("bad_request", f"row {i}: token id out of range [0, {vocab_size})")
        if r.source is None and not r.feed:
            raise EngineError("bad_request", f"row {i}: a new row needs at least one token")
        held = 0
        if r.source is not None:
            src, row = r.source
            if not 0 <= row < src.batch:
                raise EngineError("bad_request", f"row {i}: row {row} not in its source session of {src.batch}")
            held = len(src.tokens[row])
            if held != r.expect:
                raise EngineError("stale_row", f"row {i}: its source row holds {held} tokens, the caller expected "
                                               f"{r.expect}: send the whole sequence as a new row")
        need = max(need, held + len(r.feed) + max(r.params.max_new_tokens, 1))
    session = Session(model, len(rows), need)
    feeds: List[List[int]] = []
    for i, r in enumerate(rows):
        session.row_seeds[i] = int(r.seed)
        if r.source is None:
            feeds.append(list(r.feed))
            continue
        src, row = r.source
        c = src.cached[row]
        for old, new in zip(src.cache, session.cache):
            new.k[i, :, :c].copy_(old.k[row, :, :c])
            new.v[i, :, :c].copy_(old.v[row, :, :c])
        session.tokens[i] = list(src.tokens[row])
        session.cached[i] = c
        feeds.append(session.tokens[i][c:] + list(r.feed))
    return session, feeds


def batch(model: Transformer, rows: List[BatchRow], params: SamplingParams,
          vocab: Optional[List[bytes]] = None,
          on_step: Optional[Callable[[List[int], List[int]], None]] = None) -> "tuple[Session, List[RowResult]]":
    """Samples every row of `rows` in one batch (see compose); `params` gives the eos
    ids and the CUDA-graph switch, each row the rest. Rows sample from their own seeds."""
    for i, r in enumerate(rows):
        rowseed.check_seeds([r.seed], 1)
        if r.params.top_logprobs < 0 or r.params.top_logprobs > 20:
            raise EngineError("bad_request", f"row {i}: top_logprobs must be in [0, 20]")
        if r.params.max_new_tokens < 1:
            raise EngineError("bad_request", f"row {i}: max_new_tokens must be at least 1")
    session, feeds = compose(model, rows)
    uniform = SamplingParams(eos_token_ids=params.eos_token_ids, cuda_graph=params.cuda_graph)
    return session, run(session, feeds, uniform, vocab, [r.params for r in rows], on_step)
