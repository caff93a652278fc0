"""Model configuration: a dataclass with named presets and the Hugging Face
`config.json` mapping for the Qwen2 family (Qwen2, Qwen2.5)."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Optional

from .errors import EngineError


# Upper bounds a config.json may ask for: far above any published Qwen2 shape, low
# enough that a corrupt or hostile file is refused before it allocates terabytes.
LIMITS: Dict[str, int] = {
    "vocab_size": 1_000_000,
    "hidden_size": 65536,
    "intermediate_size": 1 << 20,
    "num_hidden_layers": 512,
    "num_attention_heads": 1024,
    "num_key_value_heads": 1024,
    "max_position_embeddings": 1 << 22,
}


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
        """Raise EngineError("bad_config") unless the shape is consistent and bounded."""
        for f, limit in LIMITS.items():
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int):
                raise EngineError("bad_config", f"{f} must be an integer, got {v!r}")
            if not 0 < v <= limit:
                raise EngineError("bad_config", f"{f} = {v} is out of range: it must be in 1..{limit}")
        for f in ("rope_theta", "rms_norm_eps"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                raise EngineError("bad_config", f"{f} must be a positive finite number, got {v!r}")
        if self.hidden_size % self.num_attention_heads:
            raise EngineError("bad_config", f"hidden_size {self.hidden_size} must be divisible by "
                                            f"num_attention_heads {self.num_attention_heads}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise EngineError("bad_config", f"num_key_value_heads {self.num_key_value_heads} must divide "
                                            f"num_attention_heads {self.num_attention_heads}")
        if self.head_dim % 2:
            raise EngineError("bad_config", f"head_dim {self.head_dim} must be even for RoPE")
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


def _qwen25(hidden: int, layers: int, heads: int, intermediate: int) -> ModelConfig:
    """A published Qwen2.5 shape: 151936 vocabulary, 2 KV heads, tied, rope_theta 1e6."""
    return ModelConfig(vocab_size=151936, hidden_size=hidden, intermediate_size=intermediate,
                       num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=2,
                       max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=True)


# Named shapes (docs/engine.md lists them):
# - tiny: the original CPU model (~1M params); kept for callers that still name it.
# - tiny-test: what unit tests use (256 tokens, 2 layers x 64): each test well under a second.
# - tiny-synthetic: the synthetic Search-R1 task's model; callers override vocab_size with
#   their word vocabulary. Equal to `tiny` with {max_position_embeddings 1024, hidden 64,
#   intermediate 192, 2 layers}, the overrides the driver used before presets existed.
# - qwen2-tiny: a Qwen2 block stack small enough for CPU tests but with the real Qwen
#   vocabulary (151936 rows), so the Qwen tokenizer's ids all fit.
# - qwen2.5-0.5b / -1.5b / -3b: the published config.json shapes (random weights only here).
_TINY = ModelConfig(vocab_size=2048, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                    rope_theta=10_000.0)
PRESETS: Dict[str, ModelConfig] = {
    "tiny": _TINY,
    "tiny-test": dataclasses.replace(_TINY, vocab_size=256, hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2),
    "tiny-synthetic": dataclasses.replace(_TINY, max_position_embeddings=1024, hidden_size=64,
                                          intermediate_size=192, num_hidden_layers=2),
    "qwen2-tiny": ModelConfig(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768,
                              rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    "qwen2.5-0.5b": _qwen25(896, 24, 14, 4864),
    "qwen2.5-1.5b": _qwen25(1536, 28, 12, 8960),
    "qwen2.5-3b": _qwen25(2048, 36, 16, 11008),
}


def from_preset(name: str, **overrides: Any) -> ModelConfig:
    """A named preset, optionally with fields replaced (e.g. vocab_size)."""
    if name not in PRESETS:
        raise EngineError("bad_config", f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return from_dict(dataclasses.asdict(PRESETS[name]), **overrides)


def from_dict(hf: Dict[str, Any], **overrides: Any) -> ModelConfig:
    """Build from an HF config dictionary; unknown keys are ignored."""
    if not isinstance(hf, dict):
        raise EngineError("bad_config", f"config must be a JSON object, got {type(hf).__name__}")
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
    try:
        cfg = ModelConfig(**{k: v for k, v in d.items() if k in names})
    except TypeError as e:
        raise EngineError("bad_config", f"config does not describe a model: {e}") from e
    return cfg.validate()


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
    if isinstance(spec, str) and not os.path.exists(spec):
        raise EngineError("bad_config", f"unknown preset {spec!r} and no such config path; "
                                        f"presets: {', '.join(sorted(PRESETS))}")
    if isinstance(spec, str):
        cfg = load_config(spec)
        return from_dict(dataclasses.asdict(cfg), **overrides) if overrides else cfg
    raise EngineError("bad_config", f"config must be a preset name, path or dict, got {type(spec).__name__}")


def source_fields(spec: Any) -> Dict[str, Any]:
    """The HF config dictionary a spec came from ({} for a preset), so a saved checkpoint
    keeps fields the engine does not model (eos_token_id, bos_token_id, ...)."""
    if isinstance(spec, dict):
        return dict(spec)
    if isinstance(spec, str) and spec not in PRESETS and os.path.exists(spec):
        path = os.path.join(spec, "config.json") if os.path.isdir(spec) else spec
        try:
            with open(path, "r", encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError):
            return {}
        return d if isinstance(d, dict) else {}
    return {}
