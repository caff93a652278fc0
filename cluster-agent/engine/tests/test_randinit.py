"""Random-weight HF folders (randinit) and the named presets."""

import json
import os
import tempfile
import unittest

import torch

import helpers  # noqa: F401 - puts hearth_engine on sys.path
from hearth_engine import checkpoint, randinit, safetensors
from hearth_engine.config import PRESETS, from_preset
from hearth_engine.model import construct


class PresetTest(unittest.TestCase):
    def test_preset_shapes(self):
        shapes = {name: (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers,
                         c.num_attention_heads, c.num_key_value_heads, c.max_position_embeddings)
                  for name, c in PRESETS.items()}
        self.assertEqual(shapes["tiny-test"], (256, 64, 128, 2, 4, 2, 4096))
        # What the synthetic task used as overrides of `tiny` before presets existed.
        self.assertEqual(from_preset("tiny-synthetic"), from_preset(
            "tiny", max_position_embeddings=1024, hidden_size=64, intermediate_size=192, num_hidden_layers=2))
        self.assertEqual(shapes["qwen2-tiny"][0], 151936)
        self.assertEqual(shapes["qwen2.5-0.5b"], (151936, 896, 4864, 24, 14, 2, 32768))
        self.assertEqual(shapes["qwen2.5-1.5b"], (151936, 1536, 8960, 28, 12, 2, 32768))
        self.assertEqual(shapes["qwen2.5-3b"], (151936, 2048, 11008, 36, 16, 2, 32768))
        self.assertAlmostEqual(from_preset("qwen2.5-0.5b").num_params() / 1e9, 0.494, places=3)
        self.assertAlmostEqual(from_preset("qwen2.5-1.5b").num_params() / 1e9, 1.544, places=3)

    def test_tensor_shapes_equal_the_model_without_building_it(self):
        for cfg in (from_preset("qwen2-tiny"), from_preset("tiny-test", tie_word_embeddings=False)):
            want = {k: tuple(v) for k, v in checkpoint.expected_shapes(construct(cfg)).items()}
            got = checkpoint.tensor_shapes(cfg)
            self.assertEqual(list(got.items()), list(want.items()))
        for name in PRESETS:
            cfg = from_preset(name)
            total = sum(torch.Size(s).numel() for s in checkpoint.tensor_shapes(cfg).values())
            self.assertEqual(total, cfg.num_params(), name)


class RandomFolderTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.cfg = from_preset("tiny-test")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, seed, shard):
        path = os.path.join(self.tmp.name, name)
        return path, randinit.write_random_folder(self.cfg, path, seed=seed, max_shard_bytes=shard,
                                                  extra_config={"eos_token_id": 7})

    def test_bytes_depend_on_the_seed_only(self):
        a, ra = self.write("a", 3, 20_000)
        b, rb = self.write("b", 3, 1 << 30)
        c, _ = self.write("c", 4, 1 << 30)
        self.assertGreater(len(ra["files"]), 1)
        self.assertEqual(rb["files"], ["model.safetensors"])
        ta, tb, tc = (checkpoint.load_model(p).state_dict() for p in (a, b, c))
        for name in checkpoint.tensor_shapes(self.cfg):
            self.assertTrue(torch.equal(ta[name], tb[name]), name)  # shard layout does not matter
        self.assertFalse(torch.equal(ta["model.embed_tokens.weight"], tc["model.embed_tokens.weight"]))
        with open(os.path.join(a, "config.json")) as f:
            hf = json.load(f)
        self.assertEqual((hf["eos_token_id"], hf["torch_dtype"], hf["hidden_size"]), (7, "bfloat16", 64))

    def test_init_follows_hf(self):
        path, _ = self.write("a", 0, 1 << 30)
        t = safetensors.load_file(os.path.join(path, "model.safetensors"))
        self.assertTrue(all(v.dtype == torch.bfloat16 for v in t.values()))
        self.assertTrue(bool((t["model.norm.weight"] == 1).all()))
        self.assertTrue(bool((t["model.layers.0.self_attn.q_proj.bias"] == 0).all()))
        std = float(t["model.embed_tokens.weight"].float().std())
        self.assertAlmostEqual(std, 0.02, delta=0.002)

    def test_shape_fields_cannot_be_replaced(self):
        with self.assertRaises(Exception) as ctx:
            randinit.write_random_folder(self.cfg, os.path.join(self.tmp.name, "x"), extra_config={"hidden_size": 8})
        self.assertIn("hidden_size", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
