"""One data-parallel trainer process for test_grpo: `dp_worker.py RANK WORLD INIT OUT [idle]`.

Every process builds the same model and the same 4-row batch, trains on its
contiguous share of rows for two steps and saves the resulting weights to OUT.
WORLD = 1 runs without torch.distributed (the reference). With `idle`, rows 2-3 are
fully masked, so rank 1 of 2 has nothing to train yet must join every all-reduce."""

import sys

import torch

from helpers import tiny_model
from hearth_engine.grpo import GRPOConfig, TrainBatch, Trainer, init_distributed, shutdown_distributed


def make_batch(seed: int = 123) -> TrainBatch:
    """4 rows of 12 tokens with different generated spans (so ranks hold unequal token counts)."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 256, (4, 12), generator=gen)
    mask = torch.zeros(4, 12, dtype=torch.bool)
    for row, (a, b) in enumerate([(3, 12), (5, 9), (2, 4), (6, 12)]):
        mask[row, a:b] = True
    adv = torch.randn(4, 1, generator=gen).expand(4, 12).contiguous()
    old = -5.5 + 0.1 * torch.randn(4, 12, generator=gen)
    return TrainBatch(tokens, mask, adv, old)


def main() -> None:
    rank, world, init, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if world > 1:
        init_distributed(rank, world, init, "gloo")
    model = tiny_model(seed=11)
    trainer = Trainer(model, GRPOConfig(lr=1e-3, kl_coef=0.05, entropy_coef=0.01, micro_batch_size=1,
                                        grad_clip=0.5))
    full = make_batch()
    if len(sys.argv) > 5 and sys.argv[5] == "idle":
        full.mask[2:] = False
    share = 4 // world
    rows = slice(rank * share, (rank + 1) * share)
    mine = TrainBatch(full.tokens[rows], full.mask[rows], full.advantages[rows], full.old_logprobs[rows])
    for _ in range(2):
        metrics = trainer.step(mine)
    torch.save({"state": model.state_dict(), "metrics": metrics}, out)
    shutdown_distributed(barrier=True)


if __name__ == "__main__":
    main()
