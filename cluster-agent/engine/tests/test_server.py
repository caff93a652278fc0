"""The pipe protocol and request dispatch, in process (frames in, frames out)."""

import io
import json
import os
import tempfile
import unittest

import torch

import helpers  # noqa: F401 - puts hearth_engine on sys.path
from hearth_engine.protocol import decode_value, encode_value, read_frame, write_frame
from hearth_engine.server import serve

TINY = {"config": "tiny-test", "threads": 1}


def exchange(*requests):
    """Serve the given (op, args) requests; return the decoded replies."""
    inp = io.BytesIO()
    for i, (op, args) in enumerate(requests):
        payloads = []
        write_frame(inp, {"id": i, "op": op, "args": encode_value(args, payloads)}, payloads)
    inp.seek(0)
    out = io.BytesIO()
    serve(inp, out)
    out.seek(0)
    replies = []
    while True:
        frame = read_frame(out)
        if frame is None:
            return replies
        header, payloads = frame
        replies.append({**header, "result": decode_value(header.get("result"), payloads)})


class ServerTest(unittest.TestCase):
    def test_requests_round_trip_with_binary_tensors(self):
        prompts = torch.tensor([1, 2, 3, 4, 5], dtype=torch.int32)
        replies = exchange(
            ("ping", {}),
            ("init_model", TINY),
            ("generate", {"tokens": prompts, "lengths": [2, 3], "params": {"max_new_tokens": 3, "temperature": 0}}),
            ("logprobs", {"tokens": torch.tensor([[1, 2, 3]], dtype=torch.int32)}),
            ("publish", {}),
        )
        self.assertTrue(all(r["ok"] for r in replies), replies)
        gen = replies[2]["result"]
        self.assertEqual(gen["lengths"].tolist(), [3, 3])
        self.assertEqual(gen["tokens"].dtype, torch.int32)
        self.assertEqual(gen["finish_reasons"], ["length", "length"])
        self.assertEqual(replies[3]["result"]["logprobs"].shape, (1, 3))
        self.assertEqual(replies[4]["result"]["kind"], "full")
        self.assertIsInstance(replies[4]["result"]["blobs"][0], bytearray)

    def test_errors_carry_code_and_traceback_and_serving_continues(self):
        replies = exchange(("generate", {"tokens": [1], "lengths": [1]}), ("nope", {}),
                           ("init_model", {"config": "no-such-preset"}), ("ping", {}))
        codes = [r.get("error", {}).get("code") for r in replies]
        self.assertEqual(codes, ["no_model", "unknown_op", "bad_config", None])
        self.assertIn("Traceback", replies[0]["error"]["traceback"])
        self.assertTrue(replies[3]["ok"])

    def test_trainer_state_ops_take_a_folder_and_random_folders_load(self):
        with tempfile.TemporaryDirectory() as tmp:
            state_dir, model_dir = os.path.join(tmp, "state"), os.path.join(tmp, "model")
            replies = exchange(
                ("init_folder", {"config": "tiny-test", "path": model_dir, "seed": 3, "max_shard_bytes": 50_000,
                                 "extra_config": {"eos_token_id": 5}}),
                ("init_model", {**TINY, "checkpoint": model_dir, "config": model_dir}),
                ("train_init", {"config": {"lr": 1e-3}}),
                ("save_state", {"path": state_dir}),
                ("load_state", {"path": state_dir}),
                ("load_state", {"path": os.path.join(tmp, "absent")}),
                ("save_checkpoint", {"path": os.path.join(tmp, "saved")}),
            )
            self.assertTrue(all(r["ok"] for r in replies[:5]), replies)
            self.assertGreater(len(replies[0]["result"]["files"]), 1)
            self.assertEqual(replies[1]["result"]["params"], replies[0]["result"]["params"])
            self.assertTrue(os.path.isfile(os.path.join(state_dir, "trainer-state.json")))
            self.assertEqual(replies[4]["result"], {"steps": 0})
            self.assertEqual(replies[5]["error"]["code"], "bad_request")
            with open(os.path.join(tmp, "saved", "config.json")) as f:
                saved = json.load(f)
            self.assertEqual(saved["eos_token_id"], 5)  # fields beyond the shape survive a save
            self.assertEqual(saved["hidden_size"], 64)

    def test_frames_with_lying_sizes_are_refused_before_anything_is_allocated(self):
        from hearth_engine.errors import EngineError

        for sizes, pattern in (([10**12], "over the limit"), ([-8], "size -8"), ([1.5], "size 1.5"), ("8", "list of sizes")):
            body = json.dumps({"id": 1, "op": "ping", "sizes": sizes}).encode()
            stream = io.BytesIO(len(body).to_bytes(4, "little") + body + b"12345678")
            with self.assertRaisesRegex(EngineError, pattern):
                read_frame(stream)

    def test_shutdown_stops_serving(self):
        replies = exchange(("shutdown", {}), ("ping", {}))
        self.assertEqual(len(replies), 1)
        self.assertTrue(replies[0]["result"]["bye"])


if __name__ == "__main__":
    unittest.main()
