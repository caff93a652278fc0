"""Model configuration: a dataclass with named presets and the Hugging Face
`config.json` mapping for the Qwen2 family (Qwen2, Qwen2.5)."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Optional

from .errors import EngineError


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Qwen2-family decoder. Field names follow HF `config.json`."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int = 32768
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    # Qwen2 has biases on q/k/v projections (not on o_proj or the MLP).
    attention_bias: bool = True

    @property
    def head_dim(self) -> int:
        """Per-head width: hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads

    def validate(self) -> "ModelConfig":
        """Raise EngineError("bad_config") unless the shape is consistent."""
        if self.hidden_size % self.num_attention_heads:
            raise EngineError("bad_config", "hidden_size must be divisible by num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise EngineError("bad_config", "num_attention_heads must be divisible by num_key_value_heads")
        if self.head_dim % 2:
            raise EngineError("bad_config", "head_dim must be even for RoPE")
        for f in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers"):
            if getattr(self, f) <= 0:
                raise EngineError("bad_config", f"{f} must be positive")
        return self

    def num_params(self) -> int:
        """Parameter count (tied embeddings counted once)."""
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        kv = self.num_key_value_heads * d
        attn = h * h + 2 * h * kv + h * h + (h + 2 * kv if self.attention_bias else 0)
        block = attn + 3 * h * i + 2 * h
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * block + emb + h

    def to_hf(self) -> Dict[str, Any]:
        """The HF `config.json` dictionary for this shape (Qwen2ForCausalLM)."""
        d = dataclasses.asdict(self)
        d.pop("attention_bias")
        d.update(
            architectures=["Qwen2ForCausalLM"],
            model_type="qwen2",
            hidden_act="silu",
            torch_dtype="bfloat16",
            use_sliding_window=False,
            attention_dropout=0.0,
            initializer_range=0.02,
        )
        return d


# Named shapes. `tiny` is the CPU test model (~1M params, learns in minutes);
# `qwen2.5-3b` matches Qwen/Qwen2.5-3B's config.json (3.09B params).
PRESETS: Dict[str, ModelConfig] = {
    "tiny": ModelConfig(
        vocab_size=2048,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rope_theta=10_000.0,
    ),
    "qwen2.5-3b": ModelConfig(
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=11008,
        num_hidden_layers=36,
        num_attention_heads=16,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    ),
}


def from_preset(name: str, **overrides: Any) -> ModelConfig:
    """A named preset, optionally with fields replaced (e.g. vocab_size)."""
    if name not in PRESETS:
        raise EngineError("bad_config", f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return from_dict(dataclasses.asdict(PRESETS[name]), **overrides)


def from_dict(hf: Dict[str, Any], **overrides: Any) -> ModelConfig:
    """Build from an HF config dictionary; unknown keys are ignored."""
    d = {**hf, **overrides}
    model_type = d.get("model_type", "qwen2")
    if model_type not in ("qwen2",):
        raise EngineError("bad_config", f"unsupported model_type {model_type!r} (only qwen2)")
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    missing = [n for n in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads") if n not in d]
    if missing:
        raise EngineError("bad_config", f"config is missing {missing}")
    d.setdefault("num_key_value_heads", d["num_attention_heads"])
    if d.get("rope_scaling"):
        raise EngineError("bad_config", "rope_scaling is not supported")
    return ModelConfig(**{k: v for k, v in d.items() if k in names}).validate()


def load_config(path: str) -> ModelConfig:
    """Read `config.json` (a file, or a directory containing one)."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, "r", encoding="utf-8") as f:
            return from_dict(json.load(f))
    except (OSError, ValueError) as e:
        raise EngineError("bad_config", f"cannot read {path}: {e}") from e


def resolve(spec: Any, overrides: Optional[Dict[str, Any]] = None) -> ModelConfig:
    """A preset name, a path to config.json, or an HF config dictionary."""
    overrides = overrides or {}
    if isinstance(spec, dict):
        return from_dict(spec, **overrides)
    if isinstance(spec, str) and spec in PRESETS:
        return from_preset(spec, **overrides)
    if isinstance(spec, str):
        cfg = load_config(spec)
        return from_dict(dataclasses.asdict(cfg), **overrides) if overrides else cfg
    raise EngineError("bad_config", f"config must be a preset name, path or dict, got {type(spec).__name__}")
