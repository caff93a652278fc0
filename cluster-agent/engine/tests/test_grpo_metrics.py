"""The trainer's reported metrics against an independent computation on a fixed batch:
loss, policy-gradient term, k3 KL, ratio (mean and max), clip fraction, entropy,
logprob gap, NLL and the gradient norm. The reference here is written from the
formulas, in float64, over the whole batch at once (no micro-batches, no masked
gather, no shared helper of grpo.py), so a wrong sign, a wrong mask, a wrong
normaliser or a term dropped in any one of them shows."""

import copy
import math
import unittest

import torch

from helpers import tiny_model
from hearth_engine.grpo import GRPOConfig, TrainBatch, Trainer

CFG = dict(lr=1e-3, kl_coef=0.05, entropy_coef=0.01, clip_low=0.2, clip_high=0.28, micro_batch_size=2,
           grad_clip=1e9, autocast=False)


def fixed_batch(model: torch.nn.Module) -> TrainBatch:
    """6 rows of 14 tokens; sampler and reference logprobs set around the policy's own so
    ratios spread across both clip bounds and the KL is far from 0."""
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, 256, (6, 14), generator=gen)
    mask = torch.zeros(6, 14, dtype=torch.bool)
    for row, (a, b) in enumerate([(3, 14), (5, 9), (2, 4), (6, 14), (1, 13), (8, 11)]):
        mask[row, a:b] = True
    adv = torch.randn(6, 1, generator=gen).expand(6, 14).contiguous()
    with torch.no_grad():
        own = torch.log_softmax(model(tokens).double(), -1)[:, :-1].gather(-1, tokens[:, 1:, None])[..., 0]
    own = torch.cat([torch.zeros(6, 1, dtype=torch.float64), own], dim=1).float()
    old = own + 0.35 * torch.randn(6, 14, generator=gen)
    ref = own + 0.5 * torch.randn(6, 14, generator=gen)
    return TrainBatch(tokens, mask, adv, old, ref)


def independent(model: torch.nn.Module, b: TrainBatch, cfg: dict) -> dict:
    """The metrics from their definitions, in float64, on a copy of the model."""
    m = copy.deepcopy(model).double()
    m.train()
    logits = m(b.tokens).double()[:, :-1]                       # predicts tokens[:, 1:]
    logq = logits - torch.logsumexp(logits, -1, keepdim=True)
    logp = logq.gather(-1, b.tokens[:, 1:, None])[..., 0]
    entropy = -(logq.exp() * logq).sum(-1)
    sel = b.mask[:, 1:]
    n = sel.sum().double()
    old, ref, adv = (t[:, 1:].double()[sel] for t in (b.old_logprobs, b.ref_logprobs, b.advantages))
    lp, ent = logp[sel], entropy[sel]
    ratio = torch.exp(lp - old)
    lo, hi = 1 - cfg["clip_low"], 1 + cfg["clip_high"]
    pg = -torch.minimum(ratio * adv, torch.clamp(ratio, lo, hi) * adv)
    kl = torch.exp(ref - lp) - (ref - lp) - 1
    loss = pg + cfg["kl_coef"] * kl - cfg["entropy_coef"] * ent
    (loss.sum() / n).backward()
    grad_norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in m.parameters() if p.grad is not None))
    r = ratio.detach()
    return {
        "tokens": float(n), "loss": float(loss.sum() / n), "pg": float(pg.sum() / n), "kl": float(kl.sum() / n),
        "entropy": float(ent.sum() / n), "ratio": float(r.mean()), "ratio_max": float(r.max()),
        "clipped": float(((r < lo) | (r > hi)).double().mean()), "gap": float((lp - old).abs().mean()),
        "gap_max": float((lp - old).abs().max()), "nll": float(-lp.mean()), "grad_norm": grad_norm,
    }


class IndependentMetricsTest(unittest.TestCase):
    def test_every_reported_metric_matches_its_definition(self):
        model = tiny_model(seed=5)
        batch = fixed_batch(model)
        want = independent(model, batch, CFG)
        self.assertGreater(want["clipped"], 0.1, "the batch exercises clipping")
        self.assertLess(want["clipped"], 0.9)
        self.assertGreater(want["kl"], 0.05, "the batch exercises the KL term")
        got = Trainer(model, GRPOConfig(**CFG)).step(batch)
        self.assertEqual(got["tokens"], want["tokens"])
        for key in ("loss", "pg", "kl", "entropy", "ratio", "ratio_max", "clipped", "gap", "gap_max", "nll", "grad_norm"):
            self.assertTrue(math.isclose(got[key], want[key], rel_tol=2e-4, abs_tol=1e-6),
                            f"{key}: trainer {got[key]!r}, independent {want[key]!r}")

    def test_the_comparison_catches_a_wrong_term(self):
        """The same check with the KL coefficient doubled in the reference only: the loss and
        the gradient norm no longer agree (the tolerance is far tighter than any real error)."""
        model = tiny_model(seed=5)
        batch = fixed_batch(model)
        wrong = independent(model, batch, {**CFG, "kl_coef": 2 * CFG["kl_coef"]})
        got = Trainer(model, GRPOConfig(**CFG)).step(batch)
        self.assertFalse(math.isclose(got["loss"], wrong["loss"], rel_tol=2e-4, abs_tol=1e-6))
        self.assertFalse(math.isclose(got["grad_norm"], wrong["grad_norm"], rel_tol=2e-4, abs_tol=1e-6))


if __name__ == "__main__":
    unittest.main()
