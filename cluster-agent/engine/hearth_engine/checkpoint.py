"""Hugging Face checkpoint layout: `config.json` plus `model.safetensors` or a sharded
`model.safetensors.index.json`, with exact name and shape checks.

Loading refuses missing, unexpected or shape-mismatched tensors with one
EngineError("checkpoint_mismatch") that lists them; a tied model accepts but ignores
a stored `lm_head.weight` (HF writes one for some tied models).
"""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional

import torch
from torch import Tensor

from . import safetensors
from .config import ModelConfig, load_config
from .errors import EngineError
from .model import Transformer, construct

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


def expected_shapes(model: Transformer) -> Dict[str, torch.Size]:
    """HF tensor names and shapes this model stores (tied lm_head excluded)."""
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        shapes.pop("lm_head.weight", None)
    return shapes


def checkpoint_files(path: str) -> Dict[str, str]:
    """Map tensor name -> file for a checkpoint directory (or a single .safetensors file)."""
    if os.path.isfile(path):
        return {name: path for name in safetensors.read_header(path)}
    index = os.path.join(path, INDEX)
    if os.path.isfile(index):
        try:
            with open(index, "r", encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise EngineError("bad_safetensors", f"{index}: not a valid shard index: {e}") from e
        return {name: os.path.join(path, shard) for name, shard in weight_map.items()}
    single = os.path.join(path, SINGLE)
    if os.path.isfile(single):
        return {name: single for name in safetensors.read_header(single)}
    raise EngineError("bad_safetensors", f"{path}: neither {SINGLE} nor {INDEX} found")


def check_names(expected: Dict[str, torch.Size], found: Dict[str, torch.Size], tied: bool, source: str) -> None:
    """Raise EngineError("checkpoint_mismatch") unless names and shapes match exactly."""
    extra = dict(found)
    if tied:
        extra.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(extra))
    unexpected = sorted(set(extra) - set(expected))
    wrong = sorted(f"{n}: file {list(extra[n])} vs model {list(expected[n])}"
                   for n in set(expected) & set(extra) if list(extra[n]) != list(expected[n]))
    if missing or unexpected or wrong:
        def show(items: List[str]) -> str:
            return ", ".join(items[:8]) + (f" (+{len(items) - 8} more)" if len(items) > 8 else "")
        parts = [f"{label} {len(items)}: {show(items)}" for label, items in
                 (("missing", missing), ("unexpected", unexpected), ("shape mismatch", wrong)) if items]
        raise EngineError("checkpoint_mismatch", f"{source}: " + "; ".join(parts))


def load_weights(model: Transformer, path: str) -> int:
    """Copy a checkpoint's tensors into `model` (cast to its dtype/device); returns the count."""
    files = checkpoint_files(path)
    by_file: Dict[str, List[str]] = {}
    for name, file in files.items():
        by_file.setdefault(file, []).append(name)
    tensors: Dict[str, Tensor] = {}
    for file, names in by_file.items():
        loaded = safetensors.load_file(file, names)
        absent = sorted(set(names) - set(loaded))
        if absent:
            raise EngineError("bad_safetensors", f"{file}: index names tensors it lacks: {absent[:8]}")
        tensors.update(loaded)
    check_names(expected_shapes(model), {k: v.shape for k, v in tensors.items()},
                model.config.tie_word_embeddings, path)
    state = model.state_dict()
    with torch.no_grad():
        for name in expected_shapes(model):
            state[name].copy_(tensors[name])
    return len(expected_shapes(model))


def load_model(path: str, device: str = "cpu", dtype: torch.dtype = torch.float32,
               config: Optional[ModelConfig] = None) -> Transformer:
    """config.json + weights from an HF-layout directory."""
    cfg = config or load_config(path)
    model = construct(cfg, device, dtype)
    load_weights(model, path)
    return model


def save_model(model: Transformer, path: str, dtype: torch.dtype = torch.bfloat16,
               max_shard_bytes: int = 5 * 1024 ** 3) -> List[str]:
    """Write config.json and weights in HF layout (sharded with an index when over
    max_shard_bytes); returns the weight file names."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(model.config.to_hf(), f, indent=2)
    state = model.state_dict()
    tensors = {n: state[n].detach().to(dtype) for n in expected_shapes(model)}
    shards = split_shards(tensors, max_shard_bytes)
    if len(shards) == 1:
        safetensors.save_file(shards[0], os.path.join(path, SINGLE), {"format": "pt"})
        return [SINGLE]
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map = {}
    total = 0
    for name, shard in zip(names, shards):
        safetensors.save_file(shard, os.path.join(path, name), {"format": "pt"})
        weight_map.update({t: name for t in shard})
        total += sum(t.numel() * t.element_size() for t in shard.values())
    with open(os.path.join(path, INDEX), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return names


def split_shards(tensors: Dict[str, Tensor], max_shard_bytes: int) -> List[Dict[str, Tensor]]:
    """Greedy split in name order so no shard exceeds max_shard_bytes (unless one tensor does)."""
    shards: List[Dict[str, Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        if shards[-1] and size + n > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += n
    return shards
