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


class FilePublicationTest(unittest.TestCase):
    """publish with out_dir writes each blob to a file and announces it before the reply; apply
    with files maps them in place: the pipe carries paths, never the weights."""

    def test_shards_are_announced_as_written_and_applied_from_files_exactly(self):
        with tempfile.TemporaryDirectory() as d:
            pub_dir = os.path.join(d, "pub")
            synthetic = {"synthetic_bytes": 6 * 1024 * 1024, "tensor_elements": 512 * 1024}
            inp = io.BytesIO()
            requests = [
                ("init_model", {"config": synthetic, "seed": 5, "threads": 1, "device": "cpu"}),
                ("publish", {"out_dir": pub_dir, "max_shard_bytes": 2 * 1024 * 1024, "keep_last": True}),
                ("perturb", {"share": 0.03, "seed": 2}),
                ("publish", {"out_dir": pub_dir}),
                ("digest", {}),
            ]
            for i, (op, args) in enumerate(requests):
                write_frame(inp, {"id": i, "op": op, "args": encode_value(args, [])}, [])
            inp.seek(0)
            out = io.BytesIO()
            # The files are read before the next publish overwrites nothing: each has its own name.
            serve(inp, out)
            out.seek(0)
            frames = []
            while True:
                f = read_frame(out)
                if f is None:
                    break
                frames.append(f[0])
            events = [f for f in frames if f.get("id") == 1 and "event" in f]
            reply = next(f for f in frames if f.get("id") == 1 and "result" in f)
            self.assertEqual(len(events), 3, "6 MiB in 2 MiB shards: one event per shard, before the reply")
            self.assertLess(frames.index(events[-1]), frames.index(reply))
            files = reply["result"]["files"]
            self.assertEqual([e["event"]["file"] for e in events], [f["path"] for f in files])
            self.assertEqual(reply["result"]["kind"], "full")
            patch = next(f for f in frames if f.get("id") == 3 and "result" in f)["result"]
            self.assertEqual(patch["kind"], "patch")
            want = next(f for f in frames if f.get("id") == 4)["result"]["digest"]
            # A reader of zeros applies the shards, then the patch, from the files.
            rd = exchange(
                ("init_model", {"config": {**synthetic, "zeros": True}, "seed": 0, "threads": 1, "device": "cpu"}),
                ("apply", {"files": [{"path": f["path"]} for f in files]}),
                ("apply", {"files": [{"path": patch["files"][0]["path"], "offset": 0, "length": patch["files"][0]["size"]}]}),
                ("digest", {}),
                ("apply", {"files": [{"path": files[0]["path"], "offset": 8, "length": 1 << 40}]}),
            )
            rd = [x for x in rd if "event" not in x]
            self.assertTrue(all(r["ok"] for r in rd[:4]), rd)
            self.assertEqual(rd[3]["result"]["digest"], want, "the reader holds the publisher's bits exactly")
            self.assertFalse(rd[4]["ok"])
            self.assertIn("lie outside", rd[4]["error"]["message"])

    def test_a_full_publication_without_keep_last_writes_the_live_tensors_and_the_next_is_full(self):
        with tempfile.TemporaryDirectory() as d:
            synthetic = {"synthetic_bytes": 2 * 1024 * 1024}
            r = exchange(
                ("init_model", {"config": synthetic, "seed": 1, "threads": 1, "device": "cpu"}),
                ("publish", {"out_dir": d, "keep_last": False}),
                ("publish", {"out_dir": d, "keep_last": False}),
            )
            replies = [x for x in r if "event" not in x]
            self.assertEqual([x["result"]["kind"] for x in replies[1:]], ["full", "full"])
