"""Loading HF folders: shard-by-shard memory, index paths, config and header sanity."""

import gc
import json
import os
import struct
import tempfile
import unittest
import weakref

import torch

from helpers import tiny_config, tiny_model
from hearth_engine import checkpoint, safetensors
from hearth_engine.config import from_dict, load_config
from hearth_engine.errors import EngineError


def raw_file(path, header, data=b""):
    """A safetensors file with a hand-written header."""
    head = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + data)


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def assert_code(self, code, fn, *needles):
        with self.assertRaises(EngineError) as ctx:
            fn()
        self.assertEqual(ctx.exception.code, code, str(ctx.exception))
        for needle in needles:
            self.assertIn(needle, str(ctx.exception))
        return ctx.exception


class ShardedLoadTest(Base):
    def test_one_shard_in_flight(self):
        model = tiny_model(seed=2)
        files = checkpoint.save_model(model, self.dir, dtype=torch.float32, max_shard_bytes=40_000)
        self.assertGreater(len(files), 3)
        real = safetensors.load_file
        alive = []  # weak references to every tensor handed out by earlier shards
        opened = []

        def spy(path, names=None):
            gc.collect()
            still = [name for name, ref in alive if ref() is not None]
            self.assertEqual(still, [], f"opening {os.path.basename(path)} while earlier shard tensors live")
            out = real(path, names)
            opened.append(os.path.basename(path))
            alive.extend((name, weakref.ref(t)) for name, t in out.items())
            return out

        safetensors.load_file = spy
        try:
            loaded = checkpoint.load_model(self.dir)
        finally:
            safetensors.load_file = real
        self.assertEqual(sorted(opened), sorted(files))  # each shard read once
        for name, t in model.state_dict().items():
            self.assertTrue(torch.equal(loaded.state_dict()[name], t), name)

    def test_headers_are_checked_before_any_data_is_read(self):
        model = tiny_model(seed=2)
        checkpoint.save_model(model, self.dir, dtype=torch.float32, max_shard_bytes=40_000)
        cfg = tiny_config(intermediate_size=96)
        real, calls = safetensors.load_file, []
        safetensors.load_file = lambda *a: calls.append(a) or real(*a)
        try:
            self.assert_code("checkpoint_mismatch", lambda: checkpoint.load_model(self.dir, config=cfg))
        finally:
            safetensors.load_file = real
        self.assertEqual(calls, [])

    def test_config_json_that_disagrees_with_the_weights_names_tensor_and_shapes(self):
        checkpoint.save_model(tiny_model(), self.dir, dtype=torch.bfloat16)
        path = os.path.join(self.dir, "config.json")
        with open(path) as f:
            hf = json.load(f)
        hf["intermediate_size"] = 96
        with open(path, "w") as f:
            json.dump(hf, f)
        self.assert_code("checkpoint_mismatch", lambda: checkpoint.load_model(self.dir),
                         "model.layers.0.mlp.gate_proj.weight: weights [128, 64] vs config [96, 64]",
                         "config.json does not describe these weights")


class IndexPathTest(Base):
    def write_index(self, shard):
        checkpoint.save_model(tiny_model(), self.dir, dtype=torch.float32)
        names = safetensors.read_header(os.path.join(self.dir, "model.safetensors"))
        with open(os.path.join(self.dir, checkpoint.INDEX), "w") as f:
            json.dump({"weight_map": {n: shard for n in names}}, f)

    def test_index_cannot_leave_its_folder(self):
        outside = os.path.join(os.path.dirname(self.dir), "elsewhere.safetensors")
        for shard in ("../elsewhere.safetensors", outside, "sub/../../x.safetensors", "", 5):
            self.write_index(shard)
            self.assert_code("bad_checkpoint", lambda: checkpoint.load_model(self.dir, config=tiny_config()))

    def test_plain_names_inside_the_folder_load(self):
        self.write_index("./model.safetensors")
        checkpoint.load_model(self.dir, config=tiny_config())

    def test_index_that_is_not_a_map(self):
        with open(os.path.join(self.dir, checkpoint.INDEX), "w") as f:
            json.dump({"weight_map": ["a"]}, f)
        self.assert_code("bad_safetensors", lambda: checkpoint.checkpoint_files(self.dir), "shard index")


class ConfigSanityTest(Base):
    BASE = tiny_config().to_hf()

    def test_bad_shapes_are_bad_config(self):
        cases = {
            "num_attention_heads": (0, "num_attention_heads = 0 is out of range"),
            "num_key_value_heads": (3, "num_key_value_heads 3 must divide num_attention_heads 4"),
            "vocab_size": (2_000_000, "vocab_size = 2000000 is out of range"),
            "hidden_size": (131072, "hidden_size = 131072 is out of range"),
            "num_hidden_layers": (1000, "num_hidden_layers = 1000"),
            "intermediate_size": (-5, "intermediate_size = -5"),
            "max_position_embeddings": (True, "max_position_embeddings must be an integer"),
            "rms_norm_eps": (0, "rms_norm_eps must be a positive"),
        }
        for field, (value, message) in cases.items():
            self.assert_code("bad_config", lambda: from_dict({**self.BASE, field: value}), message)
        self.assert_code("bad_config", lambda: from_dict({**self.BASE, "hidden_size": "64"}), "must be an integer")
        self.assert_code("bad_config", lambda: from_dict({**self.BASE, "hidden_size": 66}), "divisible")
        self.assert_code("bad_config", lambda: from_dict([1, 2]), "JSON object")

    def test_bad_config_file(self):
        path = os.path.join(self.dir, "config.json")
        with open(path, "w") as f:
            json.dump({**self.BASE, "num_key_value_heads": 0}, f)
        self.assert_code("bad_config", lambda: load_config(self.dir), "num_key_value_heads")


class HeaderSanityTest(Base):
    def test_bad_dimensions_and_offsets(self):
        path = os.path.join(self.dir, "x.safetensors")
        data = b"\0" * 16
        cases = [
            ({"dtype": "F32", "shape": [-2, -2], "data_offsets": [0, 16]}, "non-negative integers"),
            ({"dtype": "F32", "shape": [2, 2.0], "data_offsets": [0, 16]}, "non-negative integers"),
            ({"dtype": "F32", "shape": [1 << 62, 1 << 62], "data_offsets": [0, 16]}, "non-negative integers"),
            ({"dtype": "F32", "shape": [1 << 30, 1 << 30, 4], "data_offsets": [0, 16]}, "non-negative integers"),
            ({"dtype": "F32", "shape": [8, 8], "data_offsets": [0, 256]}, "do not hold 256 bytes"),
            ({"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}, "within 16 data bytes"),
            ({"dtype": "F32", "shape": [4], "data_offsets": [-16, 0]}, "data_offsets"),
            ({"dtype": "F32", "shape": [4], "data_offsets": [0, "16"]}, "must be integers"),
        ]
        for info, message in cases:
            raw_file(path, {"t": info}, data)
            self.assert_code("bad_safetensors", lambda: safetensors.read_header(path), message)
        raw_file(path, {"t": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, data)
        self.assertEqual(list(safetensors.load_file(path)["t"].shape), [2, 2])


if __name__ == "__main__":
    unittest.main()
