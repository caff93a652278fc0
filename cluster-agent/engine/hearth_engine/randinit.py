"""Random-weight Hugging Face folders: config.json plus (sharded) safetensors written
tensor by tensor from a seed, for tests and memory planning where no real weights
can be downloaded.

Each tensor has its own generator, seeded from (seed, tensor name), so its bytes do not
depend on the shard layout, the device, the thread count or which tensors came before:
the same seed always gives the same files. Values follow HF's Qwen2 init: normal(0,
0.02) matrices and embeddings, zero biases, unit norm weights, drawn in fp32 on CPU
and rounded to the on-disk dtype. Peak memory is one fp32 tensor (the 3B embedding,
1.2 GB), never the model.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any, Dict, Optional

import torch
from torch import Tensor

from .checkpoint import DEFAULT_SHARD_BYTES, tensor_shapes, write_weights
from .config import ModelConfig
from .errors import EngineError

INIT_STD = 0.02


def tensor_seed(seed: int, name: str) -> int:
    """A 63-bit generator seed for one tensor of one folder."""
    digest = hashlib.sha256(f"hearth-randinit:{int(seed)}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def init_tensor(name: str, shape, seed: int, dtype: torch.dtype = torch.bfloat16) -> Tensor:
    """The seeded initial value of one HF-named tensor."""
    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=dtype)
    if name.endswith(".bias"):
        return torch.zeros(shape, dtype=dtype)
    gen = torch.Generator().manual_seed(tensor_seed(seed, name))
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float32).mul_(INIT_STD).to(dtype)


def write_random_folder(cfg: ModelConfig, path: str, seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                        max_shard_bytes: int = DEFAULT_SHARD_BYTES,
                        extra_config: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Write config.json (the shape, plus extra_config such as eos/bos token ids) and
    seeded random weights under `path`; returns {files, total_size, params, seconds}."""
    if max_shard_bytes <= 0:
        raise EngineError("bad_request", f"max_shard_bytes must be positive, got {max_shard_bytes}")
    t0 = time.perf_counter()
    os.makedirs(path, exist_ok=True)
    hf = cfg.to_hf()
    hf["torch_dtype"] = str(dtype).replace("torch.", "")
    for key, value in (extra_config or {}).items():
        if key in hf:
            raise EngineError("bad_request", f"extra_config may not replace the shape field {key!r}")
        hf[key] = value
    shapes = tensor_shapes(cfg)
    files = write_weights(path, shapes, dtype, lambda n: init_tensor(n, shapes[n], seed, dtype), max_shard_bytes)
    tmp = os.path.join(path, f"config.json.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(hf, f, indent=2)
    os.replace(tmp, os.path.join(path, "config.json"))
    total = sum(os.path.getsize(os.path.join(path, f)) for f in files)
    return {"files": files, "total_size": total, "params": cfg.num_params(), "tensors": len(shapes),
            "seconds": time.perf_counter() - t0}
