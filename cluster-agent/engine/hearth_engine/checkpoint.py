"""Hugging Face checkpoint layout: `config.json` plus `model.safetensors` or a sharded
`model.safetensors.index.json`, with exact name and shape checks.

Loading checks every shard's header against the model before reading any data, then
copies one shard at a time into the model's own tensors: the process holds one copy of
the weights plus the one shard being read (memory-mapped, released before the next),
never a second full state dict. A shard index may only name files inside its folder.
Mismatches are one EngineError("checkpoint_mismatch") naming each tensor and both
shapes; a tied model accepts but ignores a stored `lm_head.weight` (HF writes one for
some tied models).
"""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import safetensors
from .config import ModelConfig, load_config
from .errors import EngineError
from .model import Transformer, construct

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
DEFAULT_SHARD_BYTES = 5 * 1000 ** 3  # what transformers' save_pretrained uses ("5GB")


def tensor_shapes(cfg: ModelConfig) -> Dict[str, Tuple[int, ...]]:
    """HF tensor names and shapes of a config, in the order HF writes them (tied lm_head
    excluded). Equal to expected_shapes(construct(cfg)) without allocating a model."""
    h, i, d = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    q, kv = cfg.num_attention_heads * d, cfg.num_key_value_heads * d
    out: Dict[str, Tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, h)}
    for n in range(cfg.num_hidden_layers):
        p = f"model.layers.{n}."
        out[p + "input_layernorm.weight"] = (h,)
        for proj, width in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            out[f"{p}self_attn.{proj}.weight"] = (width, h)
            if cfg.attention_bias:
                out[f"{p}self_attn.{proj}.bias"] = (width,)
        out[p + "self_attn.o_proj.weight"] = (h, q)
        out[p + "post_attention_layernorm.weight"] = (h,)
        out[p + "mlp.gate_proj.weight"] = (i, h)
        out[p + "mlp.up_proj.weight"] = (i, h)
        out[p + "mlp.down_proj.weight"] = (h, i)
    out["model.norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (cfg.vocab_size, h)
    return out


def expected_shapes(model: Transformer) -> Dict[str, torch.Size]:
    """HF tensor names and shapes this model stores (tied lm_head excluded)."""
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        shapes.pop("lm_head.weight", None)
    return shapes


def _shard_path(folder: str, index: str, shard: object) -> str:
    """The file a weight_map entry names, refused unless it is a plain relative path
    inside the index's folder (no absolute path, no `..`)."""
    if not isinstance(shard, str) or not shard or "\0" in shard:
        raise EngineError("bad_checkpoint", f"{index}: shard file name {shard!r} is not a file name")
    norm = os.path.normpath(shard)
    if os.path.isabs(shard) or norm == ".." or norm.startswith(".." + os.sep) or norm.startswith("/"):
        raise EngineError("bad_checkpoint", f"{index}: shard {shard!r} lies outside the model folder; "
                                            f"an index may only name files beside it")
    return os.path.join(folder, norm)


def checkpoint_files(path: str) -> Dict[str, str]:
    """Map tensor name -> file for a checkpoint directory (or a single .safetensors file)."""
    if os.path.isfile(path):
        return {name: path for name in safetensors.read_header(path)}
    index = os.path.join(path, INDEX)
    if os.path.isfile(index):
        try:
            with open(index, "r", encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            items = list(weight_map.items())
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise EngineError("bad_safetensors", f"{index}: not a valid shard index: {e}") from e
        return {str(name): _shard_path(path, index, shard) for name, shard in items}
    single = os.path.join(path, SINGLE)
    if os.path.isfile(single):
        return {name: single for name in safetensors.read_header(single)}
    raise EngineError("bad_safetensors", f"{path}: neither {SINGLE} nor {INDEX} found")


def check_names(expected: Dict[str, Sequence[int]], found: Dict[str, Sequence[int]], tied: bool,
                source: str) -> None:
    """Raise EngineError("checkpoint_mismatch") unless names and shapes match exactly."""
    extra = dict(found)
    if tied:
        extra.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(extra))
    unexpected = sorted(set(extra) - set(expected))
    wrong = sorted(f"{n}: weights {list(extra[n])} vs config {list(expected[n])}"
                   for n in set(expected) & set(extra) if list(extra[n]) != list(expected[n]))
    if missing or unexpected or wrong:
        def show(items: List[str]) -> str:
            return ", ".join(items[:8]) + (f" (+{len(items) - 8} more)" if len(items) > 8 else "")
        parts = [f"{label} {len(items)}: {show(items)}" for label, items in
                 (("missing", missing), ("unexpected", unexpected), ("shape mismatch", wrong)) if items]
        hint = " (config.json does not describe these weights)" if wrong else ""
        raise EngineError("checkpoint_mismatch", f"{source}: " + "; ".join(parts) + hint)


def load_weights(model: Transformer, path: str) -> int:
    """Copy a checkpoint's tensors into `model` (cast to its dtype/device), one shard at a
    time after every header has been checked; returns the number of tensors copied."""
    files = checkpoint_files(path)
    by_file: Dict[str, List[str]] = {}
    for name, file in files.items():
        by_file.setdefault(file, []).append(name)
    found: Dict[str, List[int]] = {}
    for file, names in by_file.items():
        header = safetensors.read_header(file)
        absent = sorted(set(names) - set(header))
        if absent:
            raise EngineError("bad_safetensors", f"{file}: index names tensors it lacks: {absent[:8]}")
        found.update({n: header[n]["shape"] for n in names})
    expected = expected_shapes(model)
    check_names(expected, found, model.config.tie_word_embeddings, path)
    state = model.state_dict()
    with torch.no_grad():
        for file, names in by_file.items():
            wanted = [n for n in names if n in expected]
            shard = safetensors.load_file(file, wanted)
            for name in wanted:
                state[name].copy_(shard.pop(name))
            del shard  # the last view goes: the mapping is closed before the next shard opens
    return len(expected)


def load_model(path: str, device: str = "cpu", dtype: torch.dtype = torch.float32,
               config: Optional[ModelConfig] = None) -> Transformer:
    """config.json + weights from an HF-layout directory."""
    cfg = config or load_config(path)
    model = construct(cfg, device, dtype)
    load_weights(model, path)
    return model


def plan_shards(sizes: Sequence[Tuple[str, int]], max_shard_bytes: int) -> List[List[str]]:
    """Greedy split of (name, bytes) in order so no shard exceeds max_shard_bytes (unless
    one tensor alone does)."""
    shards: List[List[str]] = [[]]
    size = 0
    for name, n in sizes:
        if shards[-1] and size + n > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += n
    return shards


def split_shards(tensors: Dict[str, Tensor], max_shard_bytes: int) -> List[Dict[str, Tensor]]:
    """plan_shards over tensors: a list of {name: tensor} shards."""
    plan = plan_shards([(n, t.numel() * t.element_size()) for n, t in tensors.items()], max_shard_bytes)
    return [{n: tensors[n] for n in names} for names in plan]


def shard_names(count: int) -> List[str]:
    """HF file names: model.safetensors alone, else model-0000i-of-0000n.safetensors."""
    return [SINGLE] if count == 1 else [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]


def write_weights(path: str, shapes: Dict[str, Sequence[int]], dtype: torch.dtype,
                  produce, max_shard_bytes: int = DEFAULT_SHARD_BYTES) -> List[str]:
    """Write weights in HF layout, streaming: `produce(name)` returns each tensor (in
    `dtype`) just before it is written, so memory holds one tensor, not the model twice.
    Sharded with an index above max_shard_bytes; returns the weight file names."""
    item = torch.empty((), dtype=dtype).element_size()
    sizes = []
    for name, shape in shapes.items():
        numel = 1
        for d in shape:
            numel *= int(d)
        sizes.append((name, numel * item))
    plan = plan_shards(sizes, max_shard_bytes)
    names = shard_names(len(plan))
    for stale in (INDEX, SINGLE):  # a folder rewritten with another shard count keeps no stale layout
        if os.path.exists(os.path.join(path, stale)) and stale not in names:
            os.unlink(os.path.join(path, stale))
    for file, tensors in zip(names, plan):
        safetensors.write_file(os.path.join(path, file), [(n, dtype, shapes[n]) for n in tensors], produce,
                               {"format": "pt"})
    if len(names) > 1:
        weight_map = {t: file for file, tensors in zip(names, plan) for t in tensors}
        with open(os.path.join(path, INDEX), "w", encoding="utf-8") as f:
            json.dump({"metadata": {"total_size": sum(n for _, n in sizes)}, "weight_map": weight_map}, f, indent=2)
    return names


def save_model(model: Transformer, path: str, dtype: torch.dtype = torch.bfloat16,
               max_shard_bytes: int = DEFAULT_SHARD_BYTES,
               source: Optional[Dict[str, object]] = None) -> List[str]:
    """Write config.json and weights in HF layout (sharded with an index when over
    max_shard_bytes); returns the weight file names. `source`: the config.json the model
    came from, whose other fields (token ids, ...) are kept; the shape always wins."""
    os.makedirs(path, exist_ok=True)
    kept = {k: v for k, v in (source or {}).items() if k not in ("torch_dtype", "dtype")}
    hf = {**kept, **model.config.to_hf()}
    hf["torch_dtype"] = str(dtype).replace("torch.", "")
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(hf, f, indent=2)
    state = model.state_dict()
    shapes = {n: tuple(s) for n, s in expected_shapes(model).items()}
    return write_weights(path, shapes, dtype, lambda n: state[n].detach().to(dtype), max_shard_bytes)
