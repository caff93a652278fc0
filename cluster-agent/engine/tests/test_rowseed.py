"""Per-row seeds (issue 12, "same seed, same run"): a row's sampled tokens depend on
its seed, its tokens and the weights only, not on the other rows of its batch, its
position in the batch, or how its session was resumed."""

import random
import unittest

import torch

from helpers import tiny_model, toy_vocab
from hearth_engine import rowseed
from hearth_engine.errors import EngineError
from hearth_engine.generate import SamplingParams, generate, resume, top_p_filter

TARGET = [5, 9, 11, 40]
OTHERS = [[7, 3, 2, 8, 200, 31], [1], [90, 91], [17, 4, 4, 4, 4, 4, 4, 4, 2], [250, 3, 1], [66] * 5, [8, 1, 2]]
SEED = 1234567


def sampling(seeds, n=12, **kw):
    return SamplingParams(max_new_tokens=n, temperature=kw.pop("temperature", 1.3), top_p=kw.pop("top_p", 0.95),
                          seeds=seeds, **kw)


def batch_with_target_at(position):
    """Eight rows: the target prompt and seed at `position`, the other prompts around it."""
    prompts = OTHERS[:position] + [TARGET] + OTHERS[position:]
    seeds = [100 + i for i in range(len(OTHERS))]
    seeds = seeds[:position] + [SEED] + seeds[position:]
    return prompts, seeds


def splitmix_reference(seed, pos):
    """The documented hash in plain Python ints, independent of the numpy code."""
    m = (1 << 64) - 1

    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        return z ^ (z >> 31)
    g = 0x9E3779B97F4A7C15
    return (mix(mix((seed + g) & m) ^ ((pos + g) & m)) >> 11) / float(1 << 53)


class BatchIndependenceTest(unittest.TestCase):
    def setUp(self):
        self.model = tiny_model(seed=11)

    def test_row_samples_the_same_alone_in_a_batch_of_8_and_at_another_position(self):
        alone = generate(self.model, [TARGET], sampling([SEED]))[1][0]
        self.assertEqual(len(alone.tokens), 12)
        for position in (0, 5, 7):
            prompts, seeds = batch_with_target_at(position)
            self.assertEqual(len(prompts), 8)
            row = generate(self.model, prompts, sampling(seeds))[1][position]
            self.assertEqual(row.tokens, alone.tokens, f"target at batch position {position}")
            torch.testing.assert_close(torch.tensor(row.logprobs), torch.tensor(alone.logprobs), atol=1e-5, rtol=0)

    def test_one_seed_for_the_call_is_batch_dependent(self):
        # Why per-row seeds exist: with one generator the target row's draws move with the batch.
        alone = generate(self.model, [TARGET], SamplingParams(max_new_tokens=12, temperature=1.3, seed=SEED))[1][0]
        prompts, _ = batch_with_target_at(5)
        row = generate(self.model, prompts, SamplingParams(max_new_tokens=12, temperature=1.3, seed=SEED))[1][5]
        self.assertNotEqual(row.tokens, alone.tokens)

    def test_different_seeds_give_different_tokens(self):
        rows = generate(self.model, [TARGET] * 4, sampling([1, 2, 3, SEED]))[1]
        self.assertEqual(len({tuple(r.tokens) for r in rows}), 4)
        again = generate(self.model, [TARGET] * 4, sampling([1, 2, 3, SEED]))[1]
        self.assertEqual([r.tokens for r in again], [r.tokens for r in rows])

    def test_greedy_ignores_seeds(self):
        greedy = SamplingParams(max_new_tokens=8, temperature=0)
        plain = generate(self.model, [TARGET, OTHERS[0]], greedy)[1]
        seeded = generate(self.model, [TARGET, OTHERS[0]], SamplingParams(max_new_tokens=8, temperature=0,
                                                                         seeds=[1, 2]))[1]
        self.assertEqual([r.tokens for r in seeded], [r.tokens for r in plain])


class ResumeTest(unittest.TestCase):
    def setUp(self):
        self.model = tiny_model(seed=12)
        self.block = [33, 34, 35, 36, 37]  # an inserted block, e.g. a search result

    def target_after_resume(self, prompts, seeds, position, blocks):
        session, first = generate(self.model, prompts, sampling(seeds, n=6))
        later = resume(session, blocks, sampling(None, n=7))  # no seeds: each row continues its stream
        return first[position].tokens, later[position].tokens

    def test_resume_after_an_inserted_block_is_batch_independent(self):
        alone = self.target_after_resume([TARGET], [SEED], 0, {0: self.block})
        prompts, seeds = batch_with_target_at(3)
        # Other rows get other blocks, some are not resumed at all.
        blocks = {0: [9, 9], 3: self.block, 4: [], 6: [1, 2, 3, 4, 5, 6, 7, 8]}
        batched = self.target_after_resume(prompts, seeds, 3, blocks)
        self.assertEqual(batched, alone)
        self.assertEqual(len(alone[1]), 7)

    def test_resume_samples_what_a_fresh_generate_of_the_whole_sequence_would(self):
        first, later = self.target_after_resume([TARGET], [SEED], 0, {0: self.block})
        fresh = generate(self.model, [TARGET + first + self.block], sampling([SEED], n=7))[1][0]
        self.assertEqual(fresh.tokens, later)

    def test_each_draw_uses_the_uniform_of_its_position_in_the_row(self):
        # The contract itself: the token at sequence index t is the inverse CDF at
        # uniforms(seed, t), so resume continues the stream instead of replaying it.
        first, later = self.target_after_resume([TARGET], [SEED], 0, {0: self.block})
        sequence = TARGET + first + self.block + later
        starts = [len(TARGET) + i for i in range(len(first))]
        starts += [len(TARGET) + len(first) + len(self.block) + i for i in range(len(later))]
        with torch.no_grad():
            logits = self.model(torch.tensor([sequence]))[0].float()  # (T, V): logits[t-1] predicts t
        for t in starts:
            probs = top_p_filter(torch.softmax(logits[t - 1: t] / 1.3, dim=-1), 0.95)
            u = torch.from_numpy(rowseed.uniforms([SEED], [t]))
            self.assertEqual(int(rowseed.inverse_cdf(probs, u)[0]), sequence[t], f"token at index {t}")

    def test_resume_with_fresh_seeds_replaces_only_the_resumed_rows(self):
        session, _ = generate(self.model, [TARGET, TARGET], sampling([SEED, SEED], n=4))
        a = resume(session, {0: self.block}, sampling([777, 888], n=5))[0].tokens
        b = resume(session, {1: self.block}, sampling(None, n=5))[1].tokens  # row 1 kept SEED
        session2, _ = generate(self.model, [TARGET], sampling([SEED], n=4))
        self.assertEqual(resume(session2, {0: self.block}, sampling(None, n=5))[0].tokens, b)
        session3, _ = generate(self.model, [TARGET], sampling([SEED], n=4))
        self.assertEqual(resume(session3, {0: self.block}, sampling([777], n=5))[0].tokens, a)
        self.assertNotEqual(a, b)

    def test_a_call_seeded_session_can_switch_to_per_row_seeds(self):
        session, _ = generate(self.model, [TARGET], SamplingParams(max_new_tokens=4, seed=5))
        rows = resume(session, {0: self.block}, sampling([SEED], n=5))
        self.assertEqual(len(rows[0].tokens), 5)


class RefusalTest(unittest.TestCase):
    def setUp(self):
        self.model = tiny_model(seed=13)

    def refused(self, fn, words):
        with self.assertRaises(EngineError) as ctx:
            fn()
        self.assertEqual(ctx.exception.code, "bad_request")
        self.assertIn(words, str(ctx.exception))

    def test_bad_seeds_are_refused_with_the_reason(self):
        two = [TARGET, TARGET]
        self.refused(lambda: generate(self.model, two, sampling([1])), "one seed per row")
        self.refused(lambda: generate(self.model, two, sampling([1, -1])), "seeds[1]")
        self.refused(lambda: generate(self.model, two, sampling([1, 2.5])), "seeds[1]")
        self.refused(lambda: generate(self.model, two, sampling([True, 2])), "seeds[0]")
        self.refused(lambda: generate(self.model, two, sampling([1, 1 << 64])), "2**64")
        self.refused(lambda: generate(self.model, two, sampling([1, 2], seed=3)), "not both")

    def test_a_refused_resume_leaves_the_session_usable(self):
        session, first = generate(self.model, [TARGET], sampling([SEED], n=4))
        self.refused(lambda: resume(session, {0: [3]}, SamplingParams(max_new_tokens=3, seed=9)), "per-row seed")
        self.refused(lambda: resume(session, {0: [3]}, sampling([1, 2], n=3)), "one seed per row")
        rows = resume(session, {0: [3]}, sampling(None, n=3))
        fresh = generate(self.model, [TARGET + first[0].tokens + [3]], sampling([SEED], n=3))[1][0]
        self.assertEqual(rows[0].tokens, fresh.tokens)

    def test_mixing_per_row_and_call_seeded_rows_in_one_resume_is_refused(self):
        session, _ = generate(self.model, [TARGET, TARGET], SamplingParams(max_new_tokens=2, seed=1))
        resume(session, {0: [3]}, sampling([SEED, SEED], n=2))  # row 0 only now has a per-row seed
        self.refused(lambda: resume(session, {0: [4], 1: [4]}, sampling(None, n=2)), "row 1 has no per-row seed")


class SamplerTest(unittest.TestCase):
    def test_uniforms_match_the_documented_hash(self):
        rnd = random.Random(0)
        seeds = [0, 1, (1 << 64) - 1, (1 << 53) - 1] + [rnd.getrandbits(64) for _ in range(60)]
        positions = [0, 5, 7, (1 << 40)] + [rnd.getrandbits(20) for _ in range(60)]
        got = rowseed.uniforms(seeds, positions).tolist()
        self.assertEqual(got, [splitmix_reference(s, p) for s, p in zip(seeds, positions)])
        self.assertTrue(all(0.0 <= u < 1.0 for u in got))

    def test_inverse_cdf_follows_the_distribution_and_never_picks_zero_mass(self):
        probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05, 0.0]) * 3  # unnormalised is fine
        n = 20000
        u = torch.from_numpy(rowseed.uniforms(list(range(n)), [0] * n))
        picks = rowseed.inverse_cdf(probs.expand(n, -1), u)
        freq = torch.bincount(picks, minlength=6).double() / n
        torch.testing.assert_close(freq, probs.double() / 3, atol=0.012, rtol=0)
        self.assertEqual(int(freq[1] * n) + int(freq[5] * n), 0)


if __name__ == "__main__":
    unittest.main()
