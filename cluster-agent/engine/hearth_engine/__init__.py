"""hearth tensor engine: a small PyTorch worker for generation, GRPO training and
exact bf16 weight deltas, driven by TypeScript over a framed pipe protocol.

Modules (one concept each, in the spirit of gpt-fast / nanoGPT):
  config      ModelConfig dataclass, named presets, HF config.json mapping
  model       the Qwen2-family decoder (no training code)
  safetensors a minimal safetensors reader/writer (stdlib + torch)
  checkpoint  HF-layout load/save with exact name and shape checks
  generate    batched KV-cache sampling, stop strings, resume
  grpo        token-level GRPO loss, micro-batched AdamW step, data parallel
  weights     bf16 export, sparse patches, exact application
  protocol    pipe framing: JSON header + raw binary payloads
  server      request dispatch for the TypeScript TensorEngine
"""

from .errors import EngineError

__all__ = ["EngineError"]
__version__ = "0.1.0"
