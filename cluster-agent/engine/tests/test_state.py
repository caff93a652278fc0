"""Trainer state without pickle: save, load into a fresh trainer, and continue bit for bit."""

import os
import tempfile
import unittest

import torch

from dp_worker import make_batch
from helpers import tiny_config, tiny_model
from hearth_engine import state
from hearth_engine.errors import EngineError
from hearth_engine.grpo import GRPOConfig, Trainer
from hearth_engine.model import build_model

CFG = dict(lr=1e-3, kl_coef=0.05, entropy_coef=0.01, weight_decay=0.01, micro_batch_size=2, grad_clip=0.5)


def bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and \
        torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


class TrainerStateTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = os.path.join(self.tmp.name, "state")

    def tearDown(self):
        self.tmp.cleanup()

    def assert_same_trainer(self, a: Trainer, b: Trainer) -> None:
        self.assertEqual(a.steps, b.steps)
        for (na, pa), (nb, pb) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
            self.assertEqual(na, nb)
            self.assertTrue(bitwise(pa, pb), na)
        if a.ref is not None:
            for (na, pa), pb in zip(a.ref.state_dict().items(), b.ref.state_dict().values()):
                self.assertTrue(bitwise(pa, pb), "ref " + na)
        self.assertEqual(len(a.params), len(b.params))
        for pa, pb in zip(a.params, b.params):
            sa, sb = a.opt.state[pa], b.opt.state[pb]
            self.assertEqual(sorted(sa), sorted(sb))
            for key in sa:
                if isinstance(sa[key], torch.Tensor):
                    self.assertTrue(bitwise(sa[key], sb[key]), key)
                else:
                    self.assertEqual(sa[key], sb[key], key)
        ga = [{k: v for k, v in g.items() if k != "params"} for g in a.opt.param_groups]
        gb = [{k: v for k, v in g.items() if k != "params"} for g in b.opt.param_groups]
        self.assertEqual(ga, gb)

    def resume_exactly(self, cfg: GRPOConfig) -> None:
        batch, later = make_batch(1), make_batch(2)
        a = Trainer(tiny_model(seed=11), cfg)
        a.step(batch)
        a.step(batch)
        saved = state.save_state(a, self.dir)
        self.assertEqual(saved["steps"], 2)
        files = sorted(os.listdir(self.dir))
        self.assertTrue(all(f.endswith((".json", ".safetensors")) for f in files), files)
        b = Trainer(tiny_model(seed=99), cfg)  # different weights: everything must come from the folder
        real_load = torch.load
        torch.load = lambda *a, **k: self.fail("load_state must not unpickle")
        try:
            self.assertEqual(state.load_state(b, self.dir), {"steps": 2})
        finally:
            torch.load = real_load
        self.assert_same_trainer(a, b)
        a.step(later)
        b.step(later)
        self.assert_same_trainer(a, b)  # the continuation is identical, AdamW moments and all

    def test_resume_is_bit_exact_with_reference(self):
        self.resume_exactly(GRPOConfig(**CFG))

    def test_resume_is_bit_exact_with_frozen_embeddings(self):
        self.resume_exactly(GRPOConfig(**{**CFG, "kl_coef": 0.0}, freeze_embeddings=True, embedding_rms=0.5))

    def test_resaving_replaces_the_folder(self):
        a = Trainer(tiny_model(seed=11), GRPOConfig(**CFG))
        a.step(make_batch(1))
        state.save_state(a, self.dir)
        a.step(make_batch(1))
        state.save_state(a, self.dir)
        b = Trainer(tiny_model(seed=11), GRPOConfig(**CFG))
        state.load_state(b, self.dir)
        self.assert_same_trainer(a, b)

    def test_wrong_inputs_are_clear_errors(self):
        a = Trainer(tiny_model(seed=11), GRPOConfig(**CFG))
        a.step(make_batch(1))
        pt = os.path.join(self.tmp.name, "trainer-state.pt")
        with open(pt, "wb") as f:
            f.write(b"\x80\x04 a pickle")
        for path, needle in ((pt, "is a file"), (os.path.join(self.tmp.name, "none"), "trainer-state.json missing")):
            with self.assertRaises(EngineError) as ctx:
                state.load_state(a, path)
            self.assertEqual(ctx.exception.code, "bad_request")
            self.assertIn(needle, str(ctx.exception))
        state.save_state(a, self.dir)
        other = Trainer(build_model(tiny_config(intermediate_size=96), seed=1), GRPOConfig(**CFG))
        with self.assertRaises(EngineError) as ctx:
            state.load_state(other, self.dir)
        self.assertEqual(ctx.exception.code, "checkpoint_mismatch")
        self.assertIn("mlp.gate_proj.weight: state [128, 64] vs trainer [96, 64]", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
