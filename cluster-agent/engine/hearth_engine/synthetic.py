"""Synthetic weights: named bf16 tensors of a chosen total size and no forward pass.

The weight path's benchmark (`npm run bench -- weights --bytes 6.2g`) publishes and
applies a publication of a real model's size without building the model: what it
moves is the same (bf16 tensors in safetensors shards), what it skips is the
transformer around them. A 6.2 GB publication then fits on a machine whose memory
holds three copies of it, not three models plus their activations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import torch
from torch import Tensor, nn

from .errors import EngineError
from .hostmem import pack_weights

# Elements per tensor (128 MiB of bf16): like a 3B model's large matrices.
DEFAULT_TENSOR_ELEMENTS = 64 * 1024 * 1024


@dataclass
class SyntheticConfig:
    """What init_model({"synthetic_bytes": N}) builds."""

    total_bytes: int
    tensor_elements: int = DEFAULT_TENSOR_ELEMENTS
    tie_word_embeddings: bool = False

    def num_params(self) -> int:
        return self.total_bytes // 2

    def to_hf(self) -> Dict[str, object]:
        return {"synthetic_bytes": self.total_bytes, "tensor_elements": self.tensor_elements}


class SyntheticWeights(nn.Module):
    """bf16 tensors `synthetic.<i>` of `tensor_elements` values each (the last one shorter),
    `total_bytes` in all: random from `seed` (a publisher), or zeros (a reader that will
    receive them)."""

    def __init__(self, cfg: SyntheticConfig, seed: int, device: str, random: bool):
        super().__init__()
        if cfg.total_bytes <= 0 or cfg.total_bytes % 2:
            raise EngineError("bad_request", f"synthetic_bytes must be a positive even number of bytes; got {cfg.total_bytes}")
        self.config = cfg
        g = torch.Generator().manual_seed(seed)
        left, i = cfg.total_bytes // 2, 0
        while left > 0:
            n = min(cfg.tensor_elements, left)
            if random:
                # Random bit patterns, NaNs and all: the path must be exact for every pattern.
                t = torch.randint(-32768, 32768, (n,), dtype=torch.int16, generator=g).view(torch.bfloat16)
            else:
                t = torch.zeros(n, dtype=torch.bfloat16)
            self.register_parameter(f"w{i:05d}", nn.Parameter(t.to(device), requires_grad=False))
            left -= n
            i += 1
        pack_weights(self)  # on CPU into huge pages, as a real model's (model.construct)


def build_synthetic(total_bytes: int, seed: int, device: str, random: bool, tensor_elements: int = DEFAULT_TENSOR_ELEMENTS) -> SyntheticWeights:
    """The synthetic weights init_model builds for {"synthetic_bytes": N}."""
    return SyntheticWeights(SyntheticConfig(int(total_bytes), int(tensor_elements)), seed, device, random)


def is_synthetic(model: nn.Module) -> bool:
    return isinstance(model, SyntheticWeights)


def synthetic_tensors(model: SyntheticWeights) -> Dict[str, Tensor]:
    return {n: p.data for n, p in model.named_parameters()}
