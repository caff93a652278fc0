"""GRPO training: token-level clipped policy-gradient loss with per-token advantages,
k3 KL to a frozen reference, optional entropy bonus, micro-batches, AdamW on fp32
master weights (bf16 autocast on CUDA), gradient clipping and data-parallel
gradient all-reduce (nccl on GPU, gloo on CPU).

Batch layout: every per-token array is (N, T) aligned with `tokens`, i.e. position t
holds the value for token t predicted from tokens < t; position 0 is never trained.
`mask[t]` is True only for generated tokens. The loss is the sum over masked tokens
of all ranks divided by their global count (DAPO-style token-level normalisation),
so N rows split over ranks give the same update as one process.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from .errors import EngineError
from .model import Transformer
from .rendezvous import signed_tcp_store


@dataclass
class GRPOConfig:
    """Optimiser and loss settings. The ratio is clipped to [1 - clip_low, 1 + clip_high]."""

    lr: float = 1e-6
    betas: Tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    grad_clip: float = 1.0
    micro_batch_size: int = 8
    autocast: bool = True
    checkpointing: bool = False
    # Keep the (tied) token embeddings at their initial values: every token then looks
    # alike to the network, so what it learns about copying one name holds for all names.
    freeze_embeddings: bool = False
    # With frozen tied embeddings the output logits are h . E: rescale E to this per-element RMS
    # (idempotent; 0 keeps it) so a small model can reach a peaked distribution quickly.
    embedding_rms: float = 0.0
    # Report the policy's entropy on trained tokens even when it is not in the loss (one
    # softmax per micro-batch, without gradient).
    track_entropy: bool = True


@dataclass
class TrainBatch:
    """One optimiser step's rows for this rank. All (N, T); ref_logprobs optional
    (computed from the frozen reference when kl_coef > 0 and absent)."""

    tokens: Tensor
    mask: Tensor
    advantages: Tensor
    # None: the policy's own logprobs (ratio 1; with advantage 1 the loss is then cross-entropy).
    old_logprobs: Optional[Tensor]
    ref_logprobs: Optional[Tensor] = None


def sequence_logprobs(model: Transformer, tokens: Tensor, with_entropy: bool = False,
                      at: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
    """log p(tokens[:, 1:]) and optionally the entropy of each predicting distribution:
    tokens (N, T) -> (N, T-1), computed in fp32.

    With `at` (N, T-1) bool, only those positions are computed (the rest are 0): the
    vocabulary projection, log-softmax and entropy then cost what the trained tokens
    need, not what the prompt and the retrieved passages would (most of a Search-R1
    row, and for a 152k vocabulary most of the step's memory)."""
    if at is None:
        logits = model(tokens)[:, :-1].float()  # (N, T-1, V)
        targets = tokens[:, 1:]
    else:
        # A trailing False column: the last position predicts nothing.
        pick = torch.cat([at, torch.zeros_like(at[:, :1])], dim=1)
        logits = model(tokens, positions=pick).float()  # (M, V)
        targets = tokens[:, 1:][at]
    lse = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, targets[..., None])[..., 0] - lse
    entropy: Optional[Tensor] = None
    if with_entropy:
        probs = torch.softmax(logits, dim=-1)
        entropy = lse - (probs * logits).sum(-1)
    if at is None:
        return logp, entropy

    def dense(v: Tensor) -> Tensor:
        return torch.zeros(at.shape, dtype=v.dtype, device=v.device).masked_scatter(at, v)
    return dense(logp), dense(entropy) if entropy is not None else None


def token_losses(logp: Tensor, old: Tensor, ref: Optional[Tensor], adv: Tensor, mask: Tensor,
                 entropy: Optional[Tensor], cfg: GRPOConfig) -> Dict[str, Tensor]:
    """Per-token loss terms (N, T'): masked positions are replaced by neutral values
    before any arithmetic, so garbage there can add nothing (not even NaN) to loss or grad."""
    logp_d = logp.detach()
    old = torch.where(mask, old, logp_d)
    # The live agreement check: how far the sampler's logprobs are from the trainer's own on
    # the same tokens (0 with identical weights and numerics; large when a rollout was stale).
    gap = (logp_d - old).abs()
    adv = torch.where(mask, adv, torch.zeros_like(adv))
    ratio = torch.exp(logp - old)
    clipped = ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    pg = -torch.min(ratio * adv, clipped * adv)
    total = pg
    out = {"pg": pg, "ratio": ratio.detach(), "gap": gap, "nll": -logp_d,
           "clipped": ((ratio - clipped).abs() > 0).to(logp.dtype).detach()}
    if ref is not None:
        diff = torch.where(mask, ref, logp_d) - logp  # k3: e^(r-l) - (r-l) - 1 >= 0
        kl = torch.exp(diff) - diff - 1.0
        total = total + cfg.kl_coef * kl
        out["kl"] = kl
    if entropy is not None:
        if cfg.entropy_coef > 0:
            total = total - cfg.entropy_coef * entropy
        out["entropy"] = entropy.detach()
    out["loss"] = torch.where(mask, total, torch.zeros_like(total))
    return out


def all_reduce_(tensors: List[Tensor], bucket_bytes: int = 256 * 1024 ** 2) -> None:
    """Sum tensors across ranks in place, in fp32 buckets (gloo cannot reduce bf16)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    bucket: List[Tensor] = []
    size = 0
    for t in tensors + [None]:  # type: ignore[operator]
        if t is not None:
            bucket.append(t)
            size += t.numel() * 4
        if bucket and (t is None or size >= bucket_bytes):
            flat = torch.cat([b.reshape(-1).float() for b in bucket])
            dist.all_reduce(flat)
            offset = 0
            for b in bucket:
                b.copy_(flat[offset: offset + b.numel()].view_as(b))
                offset += b.numel()
            bucket, size = [], 0


def init_distributed(rank: int, world_size: int, init_method: str, backend: Optional[str] = None,
                     timeout_s: Optional[float] = None, rendezvous_key: Optional[str] = None) -> str:
    """Join a process group; nccl on CUDA, else gloo. With `timeout_s`, every collective
    of the group (and the rendezvous) fails after that long. A tcp:// rendezvous is
    torch's unauthenticated TCPStore, so it needs the gang's `rendezvous_key` (hex): every
    value is signed with it (rendezvous.py). file:// (one host, a private folder) needs none."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if dist.is_available() and dist.is_initialized():  # a warm trainer re-initialised: keep its group
        if dist.get_rank() == rank and dist.get_world_size() == world_size:
            return str(dist.get_backend())
        raise EngineError("distributed", f"already rank {dist.get_rank()}/{dist.get_world_size()}; "
                                         f"cannot become rank {rank}/{world_size} in the same process")
    if init_method.startswith("tcp://") and not rendezvous_key:
        raise EngineError("distributed", f"rank {rank}/{world_size}: a tcp:// rendezvous needs the gang's rendezvous "
                                         f"key (ctx.rendezvous.key); torch's TCPStore does not authenticate peers")
    try:
        extra = {"timeout": timedelta(seconds=timeout_s)} if timeout_s else {}
        if rendezvous_key:
            store = signed_tcp_store(init_method, rank, world_size, rendezvous_key, timeout_s or 1800.0)
            dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, **extra)
        else:
            dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size, **extra)
    except EngineError:
        raise
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError/ValueError/TimeoutError
        raise EngineError("distributed", f"rank {rank}/{world_size} could not join {init_method}: {e}") from e
    return backend


def shutdown_distributed(barrier: bool = False) -> None:
    """Leave the process group; exiting without this can abort inside gloo's threads.
    With `barrier`, wait for every rank first (hangs if a rank is gone)."""
    if dist.is_available() and dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()


class Trainer:
    """Owns the fp32 master policy, the frozen reference and the AdamW state."""

    def __init__(self, model: Transformer, cfg: GRPOConfig):
        self.model, self.cfg = model, cfg
        self.device = model.lm_head.weight.device
        model.float()  # master weights stay fp32; autocast supplies bf16 matmuls on CUDA
        model.checkpointing = cfg.checkpointing
        self.ref: Optional[Transformer] = None
        if cfg.kl_coef > 0:
            self.ref = copy.deepcopy(model).eval().requires_grad_(False)
            if self.device.type == "cuda":
                self.ref.to(torch.bfloat16)
        if cfg.freeze_embeddings:
            emb = model.model.embed_tokens.weight
            emb.requires_grad_(False)
            if cfg.embedding_rms > 0:
                with torch.no_grad():
                    emb.mul_(cfg.embedding_rms / emb.float().pow(2).mean().sqrt().clamp_min(1e-12))
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps,
                                     weight_decay=cfg.weight_decay)
        self.steps = 0
        self.last_max = {"ratio_max": 0.0, "gap_max": 0.0}

    def _autocast(self):
        if self.cfg.autocast and self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    def accumulate(self, batch: TrainBatch, global_tokens: float) -> Dict[str, float]:
        """Backward over micro-batches; gradients hold this rank's share of the loss."""
        cfg = self.cfg
        sums = {"loss": 0.0, "pg": 0.0, "kl": 0.0, "entropy": 0.0, "ratio": 0.0, "clipped": 0.0, "gap": 0.0, "nll": 0.0}
        self.last_max = {"ratio_max": 0.0, "gap_max": 0.0}
        n = batch.tokens.shape[0]
        for i in range(0, n, max(1, cfg.micro_batch_size)):
            rows = slice(i, i + max(1, cfg.micro_batch_size))
            trained = batch.mask[rows, 1:].any(dim=0).nonzero()
            if trained.numel() == 0:
                continue  # nothing trainable: skipping adds exactly zero
            # Attention is causal, so the columns after this micro-batch's last trained token
            # cannot change its loss: drop them (rows are padded to the batch's longest).
            cols = int(trained[-1]) + 1
            tok = batch.tokens[rows, : cols + 1].to(self.device)
            mask = batch.mask[rows, 1: cols + 1].to(self.device)
            ref = batch.ref_logprobs[rows, 1: cols + 1].to(self.device) if batch.ref_logprobs is not None else None
            if ref is None and self.ref is not None:
                with torch.no_grad(), self._autocast():
                    ref, _ = sequence_logprobs(self.ref, tok, at=mask)
            with self._autocast():
                logp, ent = sequence_logprobs(self.model, tok, with_entropy=cfg.entropy_coef > 0 or cfg.track_entropy,
                                              at=mask)
            old = batch.old_logprobs[rows, 1: cols + 1].to(self.device) if batch.old_logprobs is not None else logp.detach()
            terms = token_losses(logp, old, ref,
                                 batch.advantages[rows, 1: cols + 1].to(self.device), mask, ent, cfg)
            (terms["loss"].sum() / global_tokens).backward()
            for k in sums:
                if k in terms:
                    sums[k] += float(torch.where(mask, terms[k], torch.zeros_like(terms[k])).sum())
            for k, term in (("ratio_max", terms["ratio"]), ("gap_max", terms["gap"])):
                self.last_max[k] = max(self.last_max[k], float(torch.where(mask, term, torch.zeros_like(term)).max()))
        return sums

    def step(self, batch: TrainBatch, collective: bool = True) -> Dict[str, float]:
        """One optimiser step on this rank's rows (all ranks call it together). With
        `collective=False` this rank steps alone on its rows, joining no all-reduce (the
        other ranks' weights then differ from it until they load its checkpoint)."""
        reduce_ = all_reduce_ if collective else (lambda tensors: None)
        self.model.train()
        local = batch.mask[:, 1:].sum().to(torch.float64).reshape(1).to(self.device)
        counts = torch.cat([local, torch.tensor([float(batch.tokens.shape[0])], dtype=torch.float64,
                                                device=self.device)])
        reduce_([counts])
        global_tokens = float(counts[0])
        self.opt.zero_grad(set_to_none=False)
        metrics: Dict[str, float] = {"tokens": global_tokens, "rows": float(counts[1])}
        if global_tokens == 0:
            return {**metrics, "skipped": 1.0}
        for p in self.params:  # a rank whose rows are all masked still joins the all-reduce
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        sums = self.accumulate(batch, global_tokens)
        stats = torch.tensor(list(sums.values()), dtype=torch.float64, device=self.device)
        reduce_([self.params[i].grad for i in range(len(self.params))] + [stats])
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip) \
            if self.cfg.grad_clip > 0 else torch.tensor(float("nan"))
        self.opt.step()
        self.steps += 1
        for k, v in zip(sums, stats.tolist()):
            metrics[k] = v / global_tokens
        metrics["loss"] = stats.tolist()[0] / global_tokens
        maxes = torch.tensor([self.last_max["ratio_max"], self.last_max["gap_max"]], dtype=torch.float64, device=self.device)
        if collective and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(maxes, op=dist.ReduceOp.MAX)
        metrics["ratio_max"], metrics["gap_max"] = maxes.tolist()
        metrics.update(grad_norm=float(grad_norm), lr=self.cfg.lr, step=float(self.steps))
        return metrics
