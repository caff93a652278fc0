"""GRPO: masked tokens do not influence gradients (issue test 4); two gloo processes
with half batches make the same update as one process (issue test 3)."""

import os
import subprocess
import sys
import tempfile
import unittest

import torch

from dp_worker import make_batch
from helpers import tiny_model
from hearth_engine.grpo import GRPOConfig, TrainBatch, Trainer, token_losses

HERE = os.path.dirname(os.path.abspath(__file__))


def grads(batch: TrainBatch, global_tokens: float) -> dict:
    model = tiny_model(seed=11)
    trainer = Trainer(model, GRPOConfig(kl_coef=0.1, entropy_coef=0.01, micro_batch_size=2))
    trainer.opt.zero_grad(set_to_none=False)
    trainer.accumulate(batch, global_tokens)
    return {n: p.grad.clone() for n, p in model.named_parameters()}


class MaskTest(unittest.TestCase):
    def test_masked_positions_do_not_change_gradients(self):
        batch = make_batch()
        n = float(batch.mask[:, 1:].sum())
        noisy = TrainBatch(batch.tokens.clone(), batch.mask, batch.advantages.clone(),
                           batch.old_logprobs.clone(), torch.full_like(batch.old_logprobs, -3.0))
        off = ~batch.mask
        noisy.advantages[off] = 1e6
        noisy.old_logprobs[off] = float("nan")
        noisy.ref_logprobs[off] = float("inf")
        noisy.tokens[1, 9:] = 77  # after row 1's last generated token: padding never seen by it
        # The reference model is replaced by given ref logprobs here: compare against the same.
        base_ref = TrainBatch(batch.tokens, batch.mask, batch.advantages, batch.old_logprobs,
                              torch.where(batch.mask, noisy.ref_logprobs, torch.zeros_like(noisy.ref_logprobs)))
        expected = grads(base_ref, n)
        got = grads(noisy, n)
        for name in expected:
            self.assertTrue(torch.isfinite(got[name]).all(), name)
            # Any leak of the 1e6 / NaN / inf planted above would show far beyond this tolerance.
            torch.testing.assert_close(got[name], expected[name], atol=1e-7, rtol=1e-5, msg=name)

    def test_fully_masked_row_adds_nothing(self):
        batch = make_batch()
        n = float(batch.mask[:, 1:].sum())
        dead = TrainBatch(batch.tokens, batch.mask.clone(), batch.advantages, batch.old_logprobs)
        dead.mask[2] = False
        without = TrainBatch(*(t[[0, 1, 3]] for t in (batch.tokens, batch.mask, batch.advantages,
                                                      batch.old_logprobs)))
        n_dead = float(dead.mask[:, 1:].sum())
        a, b = grads(dead, n_dead), grads(without, n_dead)
        for name in a:
            torch.testing.assert_close(a[name], b[name], atol=1e-7, rtol=1e-5, msg=name)
        self.assertNotEqual(n, n_dead)

    def test_clipping_and_kl_terms(self):
        logp = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
        old = torch.log(torch.tensor([[0.25, 0.5, 0.9]]))
        adv = torch.tensor([[1.0, 1.0, -1.0]])
        mask = torch.tensor([[True, True, False]])
        t = token_losses(logp, old, logp, adv, mask, None, GRPOConfig(clip_low=0.2, clip_high=0.2, kl_coef=1.0))
        # ratio 2 clipped at 1.2 for a positive advantage; masked token contributes 0.
        torch.testing.assert_close(t["loss"], torch.tensor([[-1.2, -1.0, 0.0]]))
        torch.testing.assert_close(t["kl"][:, :2], torch.zeros(1, 2))


class AgreementTest(unittest.TestCase):
    def test_logprob_gap_is_zero_for_the_trainers_own_logprobs_and_measures_a_shift(self):
        from hearth_engine.grpo import sequence_logprobs
        batch = make_batch()
        model = tiny_model(seed=11)
        with torch.no_grad():
            own, _ = sequence_logprobs(model, batch.tokens)
        old = torch.zeros_like(batch.old_logprobs)
        old[:, 1:] = own
        trainer = Trainer(model, GRPOConfig(lr=0.0, micro_batch_size=2))
        same = trainer.step(TrainBatch(batch.tokens, batch.mask, batch.advantages, old))
        self.assertLess(same["gap"], 1e-5)
        self.assertLess(abs(same["ratio"] - 1.0), 1e-5)
        self.assertLess(abs(same["ratio_max"] - 1.0), 1e-5)
        self.assertEqual(same["clipped"], 0.0)
        self.assertGreater(same["entropy"], 0.0, "entropy is reported even with entropy_coef 0")
        shifted = trainer.step(TrainBatch(batch.tokens, batch.mask, batch.advantages, old - 0.5))
        self.assertAlmostEqual(shifted["gap"], 0.5, places=4)
        self.assertAlmostEqual(shifted["gap_max"], 0.5, places=4)
        self.assertAlmostEqual(shifted["ratio_max"], float(torch.exp(torch.tensor(0.5))), places=3)
        self.assertEqual(shifted["clipped"], 1.0, "every ratio e^0.5 is outside [0.8, 1.2]")


class SelectedPositionsTest(unittest.TestCase):
    """The trainer computes logits only at trained positions (`at`): the same logprobs,
    entropies and gradients there as the full (N, T, V) path, exact zeros elsewhere."""

    def test_selected_positions_match_the_full_forward(self):
        from hearth_engine.grpo import sequence_logprobs
        batch = make_batch()
        at = batch.mask[:, 1:]
        self.assertTrue(bool(at.any()) and not bool(at.all()), "the batch mixes trained and untrained positions")
        full_model, sel_model = tiny_model(seed=11), tiny_model(seed=11)
        full, full_ent = sequence_logprobs(full_model, batch.tokens, with_entropy=True)
        sel, sel_ent = sequence_logprobs(sel_model, batch.tokens, with_entropy=True, at=at)
        torch.testing.assert_close(sel[at], full[at], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(sel_ent[at], full_ent[at], atol=1e-6, rtol=1e-5)
        self.assertTrue(bool((sel[~at] == 0).all()) and bool((sel_ent[~at] == 0).all()))
        (full[at].sum() + full_ent[at].sum()).backward()
        (sel[at].sum() + sel_ent[at].sum()).backward()
        sel_grads = dict(sel_model.named_parameters())
        for name, p in full_model.named_parameters():
            torch.testing.assert_close(sel_grads[name].grad, p.grad, atol=1e-6, rtol=1e-4, msg=name)

    def test_trainer_gradients_and_metrics_equal_the_full_path(self):
        """The trainer's accumulation (which passes `at`) against the same accumulation
        from full logits: gradients and every summed metric. (Compared before AdamW: its
        first step is ~lr·sign(g), so rounding-level differences of near-zero gradients
        would flip whole updates.)"""
        from hearth_engine import grpo
        batch = make_batch()
        cfg = GRPOConfig(micro_batch_size=2, kl_coef=0.1, entropy_coef=0.01)
        n = float(batch.mask[:, 1:].sum())
        a, b = Trainer(tiny_model(seed=11), cfg), Trainer(tiny_model(seed=11), cfg)
        sums_a = a.accumulate(batch, n)
        original = grpo.sequence_logprobs
        grpo.sequence_logprobs = lambda model, tokens, with_entropy=False, at=None: original(model, tokens, with_entropy)
        try:
            sums_b = b.accumulate(batch, n)
        finally:
            grpo.sequence_logprobs = original
        for k in sums_a:
            self.assertAlmostEqual(sums_a[k], sums_b[k], places=4, msg=k)
        pb = dict(b.model.named_parameters())
        for name, p in a.model.named_parameters():
            torch.testing.assert_close(p.grad, pb[name].grad, atol=1e-6, rtol=1e-4, msg=name)


class TrimmedColumnsTest(unittest.TestCase):
    def test_columns_after_the_last_trained_token_are_dropped_exactly(self):
        """Rows padded far past their trained tokens: the trainer drops those columns per
        micro-batch; the loss and gradients equal cross-entropy over the full rows."""
        from hearth_engine.grpo import sequence_logprobs
        gen = torch.Generator().manual_seed(5)
        tokens = torch.randint(0, 256, (4, 20), generator=gen)
        mask = torch.zeros(4, 20, dtype=torch.bool)
        for row, (a, b) in enumerate([(3, 9), (5, 7), (2, 4), (6, 12)]):
            mask[row, a:b] = True  # micro-batch 0 ends at column 8, micro-batch 1 at 11
        batch = TrainBatch(tokens, mask, torch.ones(4, 20), None)
        n = float(mask[:, 1:].sum())
        trainer = Trainer(tiny_model(seed=11), GRPOConfig(micro_batch_size=2, track_entropy=False))
        trainer.opt.zero_grad(set_to_none=False)
        sums = trainer.accumulate(batch, n)
        # Advantage 1 with the policy's own old logprobs: the loss gradient is that of -log p.
        ref = tiny_model(seed=11)
        logp, _ = sequence_logprobs(ref, tokens)
        at = mask[:, 1:]
        (-(logp[at]).sum() / n).backward()
        self.assertAlmostEqual(sums["nll"], float(-(logp[at]).sum()), places=3)
        got = dict(trainer.model.named_parameters())
        for name, p in ref.named_parameters():
            torch.testing.assert_close(got[name].grad, p.grad, atol=1e-6, rtol=1e-4, msg=name)


class AloneStepTest(unittest.TestCase):
    def test_a_step_alone_joins_no_collective_and_equals_a_one_process_step(self):
        from hearth_engine import grpo
        batch = make_batch()
        a, b = Trainer(tiny_model(seed=11), GRPOConfig(lr=1e-3)), Trainer(tiny_model(seed=11), GRPOConfig(lr=1e-3))
        want = a.step(batch)

        def refuse(*_args, **_kw):
            raise AssertionError("a step alone called a collective")
        saved = (grpo.all_reduce_, grpo.dist.all_reduce, grpo.dist.is_initialized)
        grpo.all_reduce_, grpo.dist.all_reduce = refuse, refuse
        grpo.dist.is_initialized = lambda: True  # as in a gang: only `collective=False` keeps it out
        try:
            got = b.step(batch, collective=False)
        finally:
            grpo.all_reduce_, grpo.dist.all_reduce, grpo.dist.is_initialized = saved
        self.assertEqual(got["loss"], want["loss"])
        pb = dict(b.model.named_parameters())
        for name, p in a.model.named_parameters():
            self.assertTrue(torch.equal(p, pb[name]), name)


class DataParallelTest(unittest.TestCase):
    def run_worker(self, rank: int, world: int, init: str, out: str, variant: str) -> subprocess.Popen:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.Popen([sys.executable, os.path.join(HERE, "dp_worker.py"), str(rank), str(world),
                                 init, out, variant], cwd=HERE, env=env, stderr=subprocess.PIPE)

    def test_two_gloo_ranks_with_half_batches_match_one_process(self):
        self.check_data_parallel("all")

    def test_rank_with_only_masked_rows_still_matches(self):
        self.check_data_parallel("idle")

    def check_data_parallel(self, variant: str) -> None:
        tmp = tempfile.mkdtemp()
        init = "file://" + os.path.join(tmp, "rendezvous")
        procs = [self.run_worker(r, 2, init, os.path.join(tmp, f"rank{r}.pt"), variant) for r in range(2)]
        single = self.run_worker(0, 1, "", os.path.join(tmp, "single.pt"), variant)
        for p in procs + [single]:
            _, err = p.communicate(timeout=90)
            self.assertEqual(p.returncode, 0, err.decode()[-2000:])
        ranks = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(2)]
        ref = torch.load(os.path.join(tmp, "single.pt"))
        for name, value in ref["state"].items():
            for r in ranks:
                torch.testing.assert_close(r["state"][name], value, atol=2e-6, rtol=1e-5, msg=name)
        self.assertEqual(ranks[0]["metrics"]["tokens"], ref["metrics"]["tokens"])
        self.assertAlmostEqual(ranks[1]["metrics"]["loss"], ref["metrics"]["loss"], places=5)
        moved = sum(float((v - tiny_model(seed=11).state_dict()[k]).abs().sum()) for k, v in ref["state"].items())
        self.assertGreater(moved, 0.0)


if __name__ == "__main__":
    unittest.main()
