"""Model shape checks and HF-layout loading (issue test 5)."""

import json
import os
import struct
import tempfile
import unittest

import torch

from helpers import tiny_config, tiny_model
from hearth_engine import checkpoint, safetensors
from hearth_engine.errors import EngineError
from hearth_engine.model import build_model


class ModelTest(unittest.TestCase):
    def test_cached_forward_matches_full_forward_for_ragged_rows(self):
        model = tiny_model()
        tokens = torch.randint(0, 256, (2, 9))
        full = model(tokens)  # (2, 9, V)
        cache = model.new_cache(2, 12)
        # Row 0 has 4 valid prompt tokens (2 of padding written after them), row 1 has 6.
        first = model(tokens[:, :6], torch.zeros(2, dtype=torch.long), cache)
        nxt = torch.stack([tokens[0, 4:7], tokens[1, 6:9]])  # (2, 3)
        rest = model(nxt, torch.tensor([4, 6]), cache)
        torch.testing.assert_close(first[1], full[1, :6], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rest[0], full[0, 4:7], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rest[1], full[1, 6:9], atol=1e-5, rtol=1e-5)

    def test_param_count_and_presets(self):
        model = tiny_model()
        self.assertEqual(sum(p.numel() for p in model.parameters()), model.config.num_params())
        from hearth_engine.config import from_preset
        self.assertLess(from_preset("tiny").num_params(), 5_000_000)
        self.assertAlmostEqual(from_preset("qwen2.5-3b").num_params() / 1e9, 3.09, places=2)


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.model = tiny_model(seed=3)
        self.tokens = torch.randint(0, 256, (2, 7))

    def test_hf_layout_loads_with_identical_logits(self):
        files = checkpoint.save_model(self.model, self.dir, dtype=torch.float32)
        self.assertEqual(files, ["model.safetensors"])
        names = safetensors.read_header(os.path.join(self.dir, "model.safetensors"))
        self.assertIn("model.layers.0.self_attn.q_proj.weight", names)
        self.assertIn("model.layers.0.self_attn.q_proj.bias", names)
        self.assertNotIn("lm_head.weight", names)  # tied
        with open(os.path.join(self.dir, "config.json")) as f:
            self.assertEqual(json.load(f)["model_type"], "qwen2")
        self.assert_same(checkpoint.load_model(self.dir), self.model)

    def assert_same(self, loaded, model):
        """Bit-identical weights; logits equal up to BLAS kernel choice (alignment-dependent on CPU)."""
        for (name, a), b in zip(loaded.state_dict().items(), model.state_dict().values()):
            self.assertTrue(torch.equal(a, b), name)
        torch.testing.assert_close(loaded(self.tokens), model(self.tokens), atol=1e-6, rtol=0)

    def test_sharded_index_loads(self):
        files = checkpoint.save_model(self.model, self.dir, dtype=torch.float32, max_shard_bytes=64 * 1024)
        self.assertGreater(len(files), 1)
        self.assertTrue(os.path.isfile(os.path.join(self.dir, checkpoint.INDEX)))
        self.assert_same(checkpoint.load_model(self.dir), self.model)

    def test_untied_model_round_trips(self):
        model = build_model(tiny_config(tie_word_embeddings=False), seed=1)
        checkpoint.save_model(model, self.dir, dtype=torch.float32)
        self.assert_same(checkpoint.load_model(self.dir), model)

    def assert_code(self, code, fn, *needles):
        with self.assertRaises(EngineError) as ctx:
            fn()
        self.assertEqual(ctx.exception.code, code, str(ctx.exception))
        for needle in needles:
            self.assertIn(needle, str(ctx.exception))

    def test_truncated_file_is_a_clear_error(self):
        checkpoint.save_model(self.model, self.dir, dtype=torch.float32)
        path = os.path.join(self.dir, "model.safetensors")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 100)
        self.assert_code("bad_safetensors", lambda: checkpoint.load_model(self.dir), "truncated")

    def test_garbage_header_is_a_clear_error(self):
        checkpoint.save_model(self.model, self.dir, dtype=torch.float32)
        path = os.path.join(self.dir, "model.safetensors")
        with open(path, "r+b") as f:
            f.seek(8)
            f.write(b"\xff\xfe not json")
        self.assert_code("bad_safetensors", lambda: checkpoint.load_model(self.dir), "JSON")
        with open(path, "r+b") as f:
            f.write(struct.pack("<Q", 1 << 40))
        self.assert_code("bad_safetensors", lambda: checkpoint.load_model(self.dir), "header length")

    def test_missing_unexpected_and_misshapen_tensors_are_named(self):
        state = {k: v for k, v in self.model.state_dict().items() if k != "lm_head.weight"}
        state.pop("model.layers.1.mlp.up_proj.weight")
        state["model.layers.9.mlp.extra.weight"] = torch.zeros(2)
        state["model.norm.weight"] = torch.ones(3)
        safetensors.save_file(state, os.path.join(self.dir, "model.safetensors"))
        with open(os.path.join(self.dir, "config.json"), "w") as f:
            json.dump(self.model.config.to_hf(), f)
        self.assert_code("checkpoint_mismatch", lambda: checkpoint.load_model(self.dir),
                         "missing 1: model.layers.1.mlp.up_proj.weight",
                         "unexpected 1: model.layers.9.mlp.extra.weight",
                         "model.norm.weight: weights [3] vs config [64]")

    def test_config_shape_mismatch_is_named(self):
        checkpoint.save_model(self.model, self.dir, dtype=torch.float32)
        other = tiny_config(intermediate_size=96)
        self.assert_code("checkpoint_mismatch", lambda: checkpoint.load_model(self.dir, config=other),
                         "mlp.gate_proj.weight: weights [128, 64] vs config [96, 64]")

    def test_no_weights_is_a_clear_error(self):
        self.assert_code("bad_safetensors", lambda: checkpoint.load_model(self.dir, config=tiny_config()),
                         "model.safetensors")


if __name__ == "__main__":
    unittest.main()


def reference_sdpa(q, k, v, attn_mask=None, is_causal=False, enable_gqa=False):
    """torch 2.x scaled_dot_product_attention semantics, in plain ops (for torch 1.13)."""
    if enable_gqa:
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], dim=-3)
    assert k.shape[-3] == q.shape[-3], "heads must match without enable_gqa"
    att = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if is_causal:
        att = att.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        att = att.masked_fill(~attn_mask, float("-inf"))
    return att.softmax(-1) @ v


class SdpaBranchTest(unittest.TestCase):
    """The torch 2.x branches of model.attend, run here against a reference SDPA."""

    def test_sdpa_branches_match_manual_attention(self):
        from hearth_engine import model as model_mod
        model = tiny_model(seed=7)
        tokens = torch.randint(0, 256, (2, 9))
        with torch.no_grad():
            want_full = model(tokens)
            cache = model.new_cache(2, 12)
            want_cached = model(tokens[:, :5], torch.tensor([0, 0]), cache)
        saved = (model_mod.HAS_SDPA, model_mod.HAS_SDPA_GQA, getattr(model_mod.F, "scaled_dot_product_attention", None))
        try:
            model_mod.F.scaled_dot_product_attention = reference_sdpa
            for gqa in (True, False):
                model_mod.HAS_SDPA, model_mod.HAS_SDPA_GQA = True, gqa
                with torch.no_grad():
                    torch.testing.assert_close(model(tokens), want_full, atol=1e-5, rtol=1e-5)
                    cache = model.new_cache(2, 12)
                    got = model(tokens[:, :5], torch.tensor([0, 0]), cache)
                torch.testing.assert_close(got, want_cached, atol=1e-5, rtol=1e-5)
        finally:
            model_mod.HAS_SDPA, model_mod.HAS_SDPA_GQA = saved[0], saved[1]
            if saved[2] is None:
                del model_mod.F.scaled_dot_product_attention
            else:
                model_mod.F.scaled_dot_product_attention = saved[2]
