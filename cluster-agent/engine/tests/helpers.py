"""Shared fixtures for the engine tests: a tiny model and a toy byte vocabulary."""

import os
import sys
from typing import List

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hearth_engine.config import ModelConfig, from_preset  # noqa: E402
from hearth_engine.model import Transformer, build_model  # noqa: E402

torch.set_num_threads(1)


def tiny_config(**overrides) -> ModelConfig:
    """The `tiny-test` preset (256 tokens, 2 layers x 64), optionally with fields replaced."""
    return from_preset("tiny-test", **overrides)


def tiny_model(seed: int = 0, **overrides) -> Transformer:
    """A random fp32 model on CPU."""
    return build_model(tiny_config(**overrides), seed=seed)


def toy_vocab(size: int) -> List[bytes]:
    """Token i decodes to the unique bytes '<i>', so text positions map back to tokens."""
    return [f"<{i}>".encode() for i in range(size)]
