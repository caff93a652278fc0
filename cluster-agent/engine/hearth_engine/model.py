"""A Qwen2-family decoder in plain PyTorch: RMSNorm, RoPE (rope_theta), grouped-query
attention, SwiGLU MLP, q/k/v bias, optionally tied embeddings.

Module names match Hugging Face (`model.layers.0.self_attn.q_proj.weight`, ...), so an
HF checkpoint's state dict loads without renaming. No training code lives here.

Runs on torch 1.13 CPU (manual attention) and torch 2.x (scaled_dot_product_attention,
with `enable_gqa` where available). Cached decoding writes each row at its own
position, so rows of one batch may have different lengths (see generate.py).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .config import ModelConfig
from .hostmem import pack_weights

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
_TORCH_MAJOR_MINOR = tuple(int(p) for p in torch.__version__.split(".")[:2] if p.isdigit())
HAS_SDPA_GQA = HAS_SDPA and _TORCH_MAJOR_MINOR >= (2, 5)


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in fp32 like HF Qwen2RMSNorm."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class KVCache(nn.Module):
    """Static per-layer key/value cache: (B, Hkv, S, D) each, written per row at
    arbitrary positions so ragged rows share one tensor (and one CUDA graph)."""

    def __init__(self, batch: int, n_kv: int, capacity: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device):
        super().__init__()
        shape = (batch, n_kv, capacity, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    @property
    def capacity(self) -> int:
        """Positions per row (S)."""
        return self.k.shape[2]

    def update(self, pos: Tensor, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor]:
        """Write k, v (B, Hkv, T, D) at positions pos (B, T); return the whole cache."""
        rows = torch.arange(pos.shape[0], device=pos.device)[:, None]  # (B, 1)
        # Advanced indices around a slice put (B, T) first: the value is (B, T, Hkv, D).
        self.k[rows, :, pos] = k.transpose(1, 2)
        self.v[rows, :, pos] = v.transpose(1, 2)
        return self.k, self.v


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the last axis, the HF RoPE convention."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(pos: Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    """cos, sin (B, 1, T, D) for integer positions pos (B, T), computed in fp32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.float32) / head_dim))
    freqs = pos.to(torch.float32)[..., None] * inv_freq  # (B, T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # (B, 1, T, D)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
    """Grouped-query attention. q (B, H, T, D); k, v (B, Hkv, S, D); mask (B, 1, T, S)
    bool (True = visible) or None for causal with S == T. Returns (B, H, T, D)."""
    B, H, T, D = q.shape
    n_kv = k.shape[1]
    group = H // n_kv
    if mask is None and HAS_SDPA:
        if group > 1 and HAS_SDPA_GQA:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    S = k.shape[2]
    if mask is None:
        mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()[None, None]
    # Fold the `group` query heads that share a kv head into the query axis, so K and V
    # are never repeated: (B, H, T, D) -> (B, Hkv, group*T, D); head h uses kv head h // group.
    qg = q.reshape(B, n_kv, group * T, D)
    mg = mask[:, :, None].expand(mask.shape[0], 1, group, T, S).reshape(mask.shape[0], 1, group * T, S)
    if HAS_SDPA:
        out = F.scaled_dot_product_attention(qg, k, v, attn_mask=mg)
    else:
        # One fused matmul: scale * q k^T on top of an additive 0 / -inf mask, so the
        # (B, Hkv, group*T, S) scores are written once instead of scaled and masked in two
        # more passes (the training forward's mask is one (T, S) triangle for every row).
        Bm = mg.shape[0]
        bias = torch.zeros(mg.shape, dtype=q.dtype, device=q.device).masked_fill_(~mg, float("-inf"))
        bias = bias.expand(Bm, n_kv, group * T, S).reshape(Bm * n_kv, group * T, S) if Bm > 1 else bias[0]
        att = torch.baddbmm(bias, qg.reshape(B * n_kv, group * T, D), k.reshape(B * n_kv, S, D).transpose(1, 2),
                            alpha=D ** -0.5)
        att = att.float().softmax(dim=-1).to(v.dtype).view(B, n_kv, group * T, S)
        out = att @ v
    return out.reshape(B, H, T, D)


class Attention(nn.Module):
    """Qwen2 self-attention: biased q/k/v projections, RoPE, GQA, unbiased output."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d, h, kv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
        self.n_head, self.n_kv, self.head_dim, self.theta = h, kv, d, cfg.rope_theta
        self.q_proj = nn.Linear(cfg.hidden_size, h * d, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(cfg.hidden_size, kv * d, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(cfg.hidden_size, kv * d, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Optional[Tensor],
                cache: Optional[KVCache], pos: Optional[Tensor]) -> Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(pos, k, v)  # (B, Hkv, S, D)
        y = attend(q, k, v, mask)  # (B, H, T, D)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm decoder layer."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Optional[Tensor] = None,
                cache: Optional[KVCache] = None, pos: Optional[Tensor] = None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, pos)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    """The HF `model.` prefix: embeddings, layers, final norm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Transformer(nn.Module):
    """Qwen2ForCausalLM-compatible decoder returning logits."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # Activation checkpointing per block for training forwards (no cache).
        self.checkpointing = False

    def init_weights(self, seed: int, std: float = 0.02) -> "Transformer":
        """Random init as HF does: normal(0, std) matrices, zero biases, unit norms."""
        device = self.lm_head.weight.device
        gen = torch.Generator(device=device).manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                elif name.endswith(".bias"):
                    p.zero_()
                else:
                    p.copy_(torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32) * std)
        return self

    def new_cache(self, batch: int, capacity: int, dtype: Optional[torch.dtype] = None) -> List[KVCache]:
        """One KVCache per layer, on the model's device and dtype."""
        w = self.lm_head.weight
        c = self.config
        return [KVCache(batch, c.num_key_value_heads, capacity, c.head_dim, dtype or w.dtype, w.device)
                for _ in range(c.num_hidden_layers)]

    def forward(self, tokens: Tensor, start: Optional[Tensor] = None,
                cache: Optional[List[KVCache]] = None, logits_at: Optional[Tensor] = None,
                positions: Optional[Tensor] = None) -> Tensor:
        """tokens (B, T). Without cache: a causal forward from position 0, logits (B, T, V).
        With cache: row b's tokens sit at positions start[b] + [0, T); each query sees the
        cache positions <= its own. logits_at (B,) selects one position per row: (B, V).
        positions, a (B, T) bool mask, selects any set of positions: (M, V) in row-major
        order, so the vocabulary projection (the largest matmul of a small model, and the
        largest activation of a long sequence) runs only where logits are needed."""
        B, T = tokens.shape
        x = self.model.embed_tokens(tokens)  # (B, T, C)
        steps = torch.arange(T, device=tokens.device)
        if cache is None:
            pos, mask = steps[None], None  # (1, T)
        else:
            assert start is not None, "cached forward needs start positions"
            pos = start[:, None] + steps  # (B, T)
            keys = torch.arange(cache[0].capacity, device=tokens.device)
            mask = (keys[None, None, :] <= pos[:, :, None])[:, None]  # (B, 1, T, S)
        cos, sin = rope_cos_sin(pos, self.config.head_dim, self.config.rope_theta, x.dtype)
        for i, layer in enumerate(self.model.layers):
            if cache is None and self.checkpointing and self.training:
                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin, mask, cache[i] if cache is not None else None, pos)
        x = self.model.norm(x)
        if logits_at is not None:
            x = x[torch.arange(B, device=x.device), logits_at]  # (B, C)
        elif positions is not None:
            x = x[positions]  # (M, C)
        return self.lm_head(x)


def build_model(cfg: ModelConfig, seed: int = 0, device: str = "cpu",
                dtype: torch.dtype = torch.float32) -> Transformer:
    """A randomly initialised model on `device` in `dtype`."""
    return construct(cfg, device, dtype).init_weights(seed)


def construct(cfg: ModelConfig, device: str = "cpu", dtype: torch.dtype = torch.float32) -> Transformer:
    """An uninitialised-for-use model allocated directly on `device` where torch allows
    (torch >= 2.0 device context), so a 3B model never passes through host memory. On
    CPU its parameters lie in one buffer of huge pages (hostmem.pack_weights: a pass
    over 4 KiB pages is bound by TLB misses on virtual machines)."""
    if torch.device(device).type == "cpu":
        model = Transformer(cfg)
        pack_weights(model, dtype)
        return model
    if hasattr(torch.device(device), "__enter__"):
        with torch.device(device):
            return Transformer(cfg).to(dtype=dtype)
    return Transformer(cfg).to(device=device, dtype=dtype)
