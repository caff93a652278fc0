"""Batches of rows from different requests (generate.batch, what the agent endpoint
runs): a continued row samples what the whole sequence sampled fresh would, with its
keys and values copied from the kept session; rows keep their own settings; a stale
source is refused; digests and top-k alternatives are those of the sampled tokens."""

import hashlib
import unittest

import torch

from helpers import tiny_model, toy_vocab
from hearth_engine.errors import EngineError
from hearth_engine.batch import BatchRow, batch
from hearth_engine.generate import RowParams, SamplingParams
from hearth_engine.grpo import sequence_logprobs

PROMPTS = [[5, 9, 11], [7, 3, 2, 8, 200, 31], [1]]
PLAIN = SamplingParams()


def rows(prompts, **kw):
    return [BatchRow(feed=list(p), params=RowParams(**kw), seed=100 + i) for i, p in enumerate(prompts)]


class BatchTest(unittest.TestCase):
    def setUp(self):
        self.model = tiny_model(seed=11)

    def test_a_row_samples_the_same_alone_and_in_a_batch(self):
        _, together = batch(self.model, rows(PROMPTS, max_new_tokens=8), PLAIN)
        for i, p in enumerate(PROMPTS):
            alone = batch(self.model, [BatchRow(feed=p, params=RowParams(max_new_tokens=8), seed=100 + i)], PLAIN)[1][0]
            self.assertEqual(alone.tokens, together[i].tokens)
            torch.testing.assert_close(torch.tensor(alone.logprobs), torch.tensor(together[i].logprobs), atol=1e-5, rtol=0)

    def test_continuing_a_kept_row_equals_sampling_the_whole_sequence(self):
        first, out = batch(self.model, rows(PROMPTS, max_new_tokens=5), PLAIN)
        appended = [[17, 18], [19], [20, 21, 22]]
        cont = [BatchRow(feed=appended[i], params=RowParams(max_new_tokens=6), seed=100 + i, source=(first, i),
                         expect=len(PROMPTS[i]) + 5) for i in range(3)]
        # Another batch's order, and a new row among the continued ones.
        order = [2, 0, 1]
        second, again = batch(self.model, [cont[i] for i in order] + [BatchRow(feed=[3, 4], params=RowParams(max_new_tokens=6), seed=7)], PLAIN)
        for k, i in enumerate(order):
            whole = PROMPTS[i] + out[i].tokens + appended[i]
            fresh = batch(self.model, [BatchRow(feed=whole, params=RowParams(max_new_tokens=6), seed=100 + i)], PLAIN)[1][0]
            self.assertEqual(again[k].tokens, fresh.tokens, f"row {i}")
            torch.testing.assert_close(torch.tensor(again[k].logprobs), torch.tensor(fresh.logprobs), atol=1e-4, rtol=0)
            self.assertEqual(second.tokens[k], whole + again[k].tokens)
        # The first session is untouched: it can be continued again.
        self.assertEqual(first.tokens[0], PROMPTS[0] + out[0].tokens)

    def test_rows_keep_their_own_settings(self):
        vocab = toy_vocab(256)
        greedy = batch(self.model, [BatchRow(feed=PROMPTS[1], params=RowParams(max_new_tokens=8, temperature=0), seed=1)], PLAIN)[1][0]
        # The first token the greedy row had not written before: the stop ends the row there.
        k = next((k for k in range(1, 8) if greedy.tokens[k] not in greedy.tokens[:k]), 0)
        stop_at = f"<{greedy.tokens[k]}>"
        mixed = [BatchRow(feed=PROMPTS[0], params=RowParams(max_new_tokens=3), seed=5),
                 BatchRow(feed=PROMPTS[1], params=RowParams(max_new_tokens=9, temperature=0, stop=(stop_at,)), seed=9),
                 BatchRow(feed=PROMPTS[2], params=RowParams(max_new_tokens=7, top_p=0.5), seed=6)]
        _, out = batch(self.model, mixed, PLAIN, vocab)
        self.assertEqual((len(out[0].tokens), out[0].finish_reason), (3, "length"))
        self.assertEqual(out[1].tokens, greedy.tokens[:k + 1])
        self.assertEqual((out[1].finish_reason, out[1].stop), ("stop", stop_at))
        self.assertEqual(len(out[2].tokens), 7)
        alone = batch(self.model, [mixed[2]], PLAIN, vocab)[1][0]
        self.assertEqual(out[2].tokens, alone.tokens)

    def test_a_stale_source_is_refused(self):
        first, out = batch(self.model, rows(PROMPTS[:1], max_new_tokens=3), PLAIN)
        with self.assertRaises(EngineError) as e:
            batch(self.model, [BatchRow(feed=[1], params=RowParams(), seed=1, source=(first, 0), expect=len(PROMPTS[0]) + 2)], PLAIN)
        self.assertEqual(e.exception.code, "stale_row")

    def test_top_k_alternatives_are_the_models_distribution(self):
        _, out = batch(self.model, rows(PROMPTS[1:2], max_new_tokens=4, top_logprobs=5), PLAIN)
        r = out[0]
        self.assertEqual(len(r.top), 4)
        whole = torch.tensor([PROMPTS[1] + r.tokens])
        with torch.no_grad():
            logits = self.model(whole)[0].float()
        for t, (ids, lps, ent) in enumerate(r.top):
            logp = torch.log_softmax(logits[len(PROMPTS[1]) - 1 + t], dim=-1)
            want_v, want_i = logp.topk(5)
            self.assertEqual(ids, want_i.tolist())
            torch.testing.assert_close(torch.tensor(lps), want_v, atol=1e-4, rtol=0)
            self.assertLessEqual(sum(torch.tensor(lps).exp().tolist()), 1.0 + 1e-6)
            self.assertAlmostEqual(ent, float(-(logp.exp() * logp).sum()), places=4)
            self.assertAlmostEqual(r.logprobs[t], float(logp[r.tokens[t]]), places=4)

    def test_logprobs_equal_the_training_forward(self):
        _, out = batch(self.model, rows(PROMPTS, max_new_tokens=6, temperature=0.7), PLAIN)
        for i, p in enumerate(PROMPTS):
            with torch.no_grad():
                logp, _ = sequence_logprobs(self.model, torch.tensor([p + out[i].tokens]))
            torch.testing.assert_close(torch.tensor(out[i].logprobs), logp[0, len(p) - 1:], atol=1e-5, rtol=0)


class StreamTest(unittest.TestCase):
    def test_streaming_rows_report_their_tokens_step_by_step(self):
        model = tiny_model(seed=12)
        steps = []
        rows = [BatchRow(feed=PROMPTS[0], params=RowParams(max_new_tokens=5, stream=True), seed=1),
                BatchRow(feed=PROMPTS[1], params=RowParams(max_new_tokens=3), seed=2),
                BatchRow(feed=PROMPTS[2], params=RowParams(max_new_tokens=4, stream=True), seed=3)]
        _, out = batch(model, rows, PLAIN, None, lambda rs, ts: steps.append(list(zip(rs, ts))))
        self.assertEqual([t for s in steps for r, t in s if r == 0], out[0].tokens)
        self.assertEqual([t for s in steps for r, t in s if r == 2], out[2].tokens)
        self.assertFalse(any(r == 1 for s in steps for r, _ in s), "a row that does not stream is not reported")
        self.assertEqual(len(steps), 5, "one report a step while a streaming row runs")


class BatchOpTest(unittest.TestCase):
    """The server op: digests of the sampled ids, a released source refused."""

    def test_op_batch_digests_and_sources(self):
        from hearth_engine.server import Engine
        eng = Engine()
        eng.op_init_model({"config": "tiny-test", "seed": 3, "threads": 1})
        args = {"tokens": torch.tensor([5, 9, 11, 1, 2], dtype=torch.int32), "lengths": torch.tensor([3, 2], dtype=torch.int32),
                "sources": [None, None], "seeds": [1, 2], "max_new_tokens": [4, 4], "temperature": [1, 1],
                "top_p": [1, 1], "stop": [[], []], "top_logprobs": [0, 0]}
        out = eng.op_batch(args)
        toks = out["tokens"].tolist()
        self.assertEqual(out["digests"][0], hashlib.sha256(torch.tensor(toks[:4], dtype=torch.int32).numpy().astype("<i4").tobytes()).hexdigest())
        cont = dict(args, tokens=torch.tensor([7], dtype=torch.int32), lengths=torch.tensor([1], dtype=torch.int32),
                    sources=[[out["session"], 1, 6]], seeds=[2], max_new_tokens=[2], temperature=[1], top_p=[1], stop=[[]], top_logprobs=[0])
        self.assertEqual(len(eng.op_batch(cont)["tokens"]), 2)
        eng.op_release({"session": out["session"]})
        with self.assertRaises(EngineError) as e:
            eng.op_batch(cont)
        self.assertEqual(e.exception.code, "no_session")


if __name__ == "__main__":
    unittest.main()
