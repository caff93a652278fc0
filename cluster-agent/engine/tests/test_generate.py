"""Sampling: sampler/trainer agreement (issue test 1), stop strings across token
boundaries and resume == fresh prefill (issue test 6)."""

import unittest

import torch

from helpers import tiny_model, toy_vocab
from hearth_engine.errors import EngineError
from hearth_engine.generate import SamplingParams, StopMatcher, generate, resume, top_p_filter
from hearth_engine.grpo import sequence_logprobs

PROMPTS = [[5, 9, 11], [7, 3, 2, 8, 200, 31], [1]]


def padded(rows):
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows])


class SamplerTrainerAgreementTest(unittest.TestCase):
    def test_generate_logprobs_equal_training_forward(self):
        model = tiny_model(seed=1)
        params = SamplingParams(max_new_tokens=12, temperature=1.0, top_p=0.9, seed=7)
        _, results = generate(model, PROMPTS, params)
        full = [p + r.tokens for p, r in zip(PROMPTS, results)]
        with torch.no_grad():
            logp, _ = sequence_logprobs(model, padded(full))  # (B, T-1), logp[t-1] = log p(token t)
        for b, (p, r) in enumerate(zip(PROMPTS, results)):
            self.assertEqual(len(r.tokens), 12)
            trainer = logp[b, len(p) - 1: len(p) - 1 + len(r.tokens)]
            torch.testing.assert_close(torch.tensor(r.logprobs), trainer, atol=1e-5, rtol=0)

    def test_seeded_sampling_is_reproducible_and_greedy_is_argmax(self):
        model = tiny_model(seed=2)
        a = generate(model, PROMPTS, SamplingParams(max_new_tokens=6, seed=3))[1]
        b = generate(model, PROMPTS, SamplingParams(max_new_tokens=6, seed=3))[1]
        self.assertEqual([r.tokens for r in a], [r.tokens for r in b])
        g = generate(model, PROMPTS[:1], SamplingParams(max_new_tokens=1, temperature=0))[1][0]
        with torch.no_grad():
            self.assertEqual(g.tokens[0], int(model(torch.tensor([PROMPTS[0]]))[0, -1].argmax()))

    def test_top_p_keeps_smallest_set_reaching_p(self):
        probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
        self.assertEqual((top_p_filter(probs, 0.7) > 0).tolist(), [[True, True, False, False]])
        self.assertEqual((top_p_filter(probs, 0.1) > 0).tolist(), [[True, False, False, False]])
        self.assertEqual((top_p_filter(probs, 1.0) > 0).tolist(), [[True, True, True, True]])

    def test_eos_stops_a_row(self):
        model = tiny_model(seed=4)
        first = generate(model, PROMPTS, SamplingParams(max_new_tokens=5, temperature=0))[1]
        eos = first[1].tokens[2]
        again = generate(model, PROMPTS, SamplingParams(max_new_tokens=5, temperature=0, eos_token_ids=[eos]))[1]
        self.assertEqual(again[1].finish_reason, "eos")
        self.assertEqual(again[1].tokens, first[1].tokens[: first[1].tokens.index(eos) + 1])


class StopAndResumeTest(unittest.TestCase):
    def setUp(self):
        self.model = tiny_model(seed=5)
        self.vocab = toy_vocab(256)

    def test_matcher_finds_stop_split_over_three_tokens(self):
        vocab = [b"</", b"sea", b"rch", b">", b"x"]
        m = StopMatcher(vocab, ["</search>"], 1)
        self.assertEqual([m.push(0, t) for t in [4, 0, 1, 2, 3]], [None, None, None, None, "</search>"])

    def test_stop_string_straddling_token_boundary_ends_the_row(self):
        greedy = SamplingParams(max_new_tokens=10, temperature=0)
        free = generate(self.model, PROMPTS, greedy, self.vocab)[1][1].tokens
        # Stop text = the tail of token 3's bytes + the head of token 4's: it exists only across them.
        stop = (self.vocab[free[3]][-2:] + self.vocab[free[4]][:2]).decode()
        text, expected = b"", None
        for i, t in enumerate(free):
            text += self.vocab[t]
            if stop.encode() in text:
                expected = i + 1
                break
        params = SamplingParams(max_new_tokens=10, temperature=0, stop=["never-there", stop])
        rows = generate(self.model, PROMPTS, params, self.vocab)[1]
        self.assertEqual(rows[1].finish_reason, "stop")
        self.assertEqual(rows[1].stop, stop)
        self.assertEqual(rows[1].tokens, free[:expected])
        self.assertLessEqual(expected, 5)

    def test_stop_strings_need_a_vocabulary(self):
        with self.assertRaises(EngineError) as ctx:
            generate(self.model, PROMPTS, SamplingParams(max_new_tokens=2, stop=["x"]))
        self.assertEqual(ctx.exception.code, "no_vocab")

    def test_resume_after_appended_tokens_equals_fresh_prefill(self):
        greedy = SamplingParams(max_new_tokens=4, temperature=0)
        session, first = generate(self.model, PROMPTS, greedy, self.vocab)
        appended = {0: [40, 41, 42], 1: [17]}  # row 2 stays idle
        cont = resume(session, appended, SamplingParams(max_new_tokens=5, temperature=0), self.vocab)
        self.assertEqual(cont[2].finish_reason, "idle")
        self.assertEqual(cont[2].tokens, [])
        for row, extra in appended.items():
            prefix = PROMPTS[row] + first[row].tokens + extra
            fresh = generate(self.model, [prefix], SamplingParams(max_new_tokens=5, temperature=0))[1][0]
            self.assertEqual(cont[row].tokens, fresh.tokens)
            torch.testing.assert_close(torch.tensor(cont[row].logprobs), torch.tensor(fresh.logprobs),
                                       atol=1e-5, rtol=0)
            self.assertEqual(session.tokens[row], prefix + fresh.tokens)

    def test_resume_grows_the_cache_and_repeats(self):
        session, _ = generate(self.model, PROMPTS[:2], SamplingParams(max_new_tokens=2, temperature=0))
        start = session.capacity
        for _ in range(3):
            resume(session, {0: list(range(10, 10 + start)), 1: []},
                   SamplingParams(max_new_tokens=2, temperature=0))
        self.assertGreater(session.capacity, start)
        fresh = generate(self.model, [session.tokens[1][:-2]], SamplingParams(max_new_tokens=2, temperature=0))
        self.assertEqual(session.tokens[1][-2:], fresh[1][0].tokens)


if __name__ == "__main__":
    unittest.main()
