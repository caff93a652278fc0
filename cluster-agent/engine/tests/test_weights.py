"""Weight publication: patches reproduce the exact bf16 bytes after several optimizer
steps, with a dense fallback above one third changed (issue test 2)."""

import mmap
import os
import re
import sys
import tempfile
import unittest
from dataclasses import asdict

import numpy as np
import torch

from dp_worker import make_batch
from helpers import tiny_config, tiny_model
from hearth_engine import safetensors, weights
from hearth_engine.errors import EngineError
from hearth_engine.grpo import GRPOConfig, Trainer
from hearth_engine.model import build_model
from hearth_engine.patch_codec import np_patch_chunks
from hearth_engine.weights import (_populate, DLT, IDX, VAL, PatchStats, changed_bits, apply_deltas, encode_deltas, perturb_bf16, Publisher, apply_blob, apply_blobs, apply_sources, decode_indices, diff_tensors,
                                   encode_indices, export_bf16, model_tensors, varint_decode, varint_encode)


def leb128(x: int) -> bytes:
    out = bytearray()
    while True:
        byte, x = x & 0x7F, x >> 7
        out.append(byte | (0x80 if x else 0))
        if not x:
            return bytes(out)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.bfloat16).view(torch.int16)


class VarintTest(unittest.TestCase):
    def test_round_trip_and_sizes(self):
        values = torch.tensor([0, 1, 127, 128, 16383, 16384, 2 ** 31 - 1, 2 ** 35 + 7, 2 ** 62])
        enc = varint_encode(values)
        self.assertEqual(enc.numel(), 1 + 1 + 1 + 2 + 2 + 3 + 5 + 6 + 9)
        self.assertTrue(torch.equal(varint_decode(enc), values))
        idx = torch.tensor([3, 4, 5, 900, 100_000, 100_001])
        self.assertTrue(torch.equal(decode_indices(encode_indices(idx)), idx))
        self.assertEqual(varint_decode(varint_encode(torch.zeros(0, dtype=torch.int64))).numel(), 0)

    def test_random_round_trips_of_every_length(self):
        g = torch.Generator().manual_seed(0)
        for trial in range(60):
            scale = [2, 200, 2 ** 20, 2 ** 40, 2 ** 62][trial % 5]
            n = int(torch.randint(1, 3000, (1,), generator=g))
            v = (torch.rand(n, generator=g, dtype=torch.float64) ** 3 * scale).to(torch.int64)
            enc = varint_encode(v)
            self.assertTrue(torch.equal(varint_decode(enc), v), f"trial {trial}")
            if trial % 5 >= 2:  # byte for byte what plain LEB128 writes (values of several bytes mixed with one-byte ones)
                self.assertEqual(bytes(enc.numpy()), b"".join(leb128(int(x)) for x in v), f"trial {trial}")

    def test_truncated_varint_is_rejected(self):
        with self.assertRaises(EngineError) as ctx:
            varint_decode(torch.tensor([0x81], dtype=torch.uint8))
        self.assertEqual(ctx.exception.code, "bad_patch")


class DeltaTest(unittest.TestCase):
    def test_bit_deltas_round_trip_and_cost_one_byte_per_ulp(self):
        old = torch.tensor([0, 1, -1, 0x7FFF, -0x8000, 0x7F80, 0x3F80, 5], dtype=torch.int16)
        new = torch.tensor([1, 0, -0x8000, -0x8000, 0x7FFF, 0x7FC1, 0x3F81, -0x7000], dtype=torch.int16)
        self.assertTrue(torch.equal(apply_deltas(old, encode_deltas(old, new)), new))
        ulp = torch.arange(1000, dtype=torch.int16)
        self.assertEqual(encode_deltas(ulp, ulp + 1).numel(), 1000)  # +-1 ulp: one byte each
        self.assertEqual(encode_deltas(ulp, ulp - 1).numel(), 1000)
        with self.assertRaises(EngineError):
            apply_deltas(old[:3], encode_deltas(old, new))

    def test_word_scan_matches_a_per_value_compare_at_every_tail_and_spread(self):
        # changed_bits compares four values per 64-bit word, in chunks: every tail length
        # (n % 4), chunk edges, changes of any size (wide deltas need multi-byte varints),
        # sparse changes (multi-byte gaps) and dense ones, with and without advancing; the last
        # trial has 150k changed values.
        g = np.random.default_rng(7)
        for trial, (n, share) in enumerate([(1, 1.0), (3, 0.5), (4, 0.5), (5, 0.3), (7, 1.0), (1001, 0.02),
                                            (40_003, 0.001), (40_002, 0.9), (70_001, 0.027), (16, 0.0), (3_000_001, 0.05)]):
            old = g.integers(-32768, 32768, n, dtype=np.int16)
            new = old.copy()
            hit = g.random(n) < share
            new[hit] = g.integers(-32768, 32768, int(hit.sum()), dtype=np.int16)
            want = np.flatnonzero(old != new)
            for advance in (False, True):
                held = old.copy()
                idx, was, now = changed_bits(held, new, advance=advance, chunk=1000)  # many chunks
                self.assertTrue(np.array_equal(idx, want), f"trial {trial}")
                self.assertTrue(np.array_equal(was, old[want]) and np.array_equal(now, new[want]), f"trial {trial}")
                self.assertTrue(np.array_equal(held, new if advance else old), f"trial {trial} advance={advance}")
            # and the patch entries apply back exactly through the chunked int16 apply
            t_old, t_new = torch.from_numpy(old.copy()).view(torch.bfloat16), torch.from_numpy(new.copy()).view(torch.bfloat16)
            entries = diff_tensors({"w": t_old.clone()}, {"w": t_new}, PatchStats())
            holder = {"w": t_old.clone()}
            apply_blob(holder, safetensors.serialize(entries, {"format": "hearth-patch", "version": "2", "base_version": "1"}))
            self.assertTrue(torch.equal(holder["w"].view(torch.int16), t_new.view(torch.int16)), f"trial {trial}")

    def test_perturbed_model_patches_exactly_into_fp32_and_bf16_holders(self):
        model = build_model(tiny_config(), seed=3, dtype=torch.bfloat16)
        publisher = Publisher()
        holders = [build_model(tiny_config(), seed=4, dtype=d) for d in (torch.bfloat16, torch.float32)]
        blobs, _ = publisher.publish(model)
        for h in holders:
            for b in blobs:
                apply_blob(model_tensors(h), b)
        names = list(model_tensors(model))
        for step, (share, dense) in enumerate([(0.027, None), (0.005, None), (0.027, names[1])]):
            perturb_bf16(model, share, seed=step, dense=dense)
            blobs, stats = publisher.publish(model)
            self.assertEqual(stats.dense, 0 if dense is None else 1)
            self.assertGreater(stats.changed, 0.5 * share * stats.elements)
            if dense is None:  # ~1 byte per gap + 1 per delta, plus the safetensors header
                self.assertLess(stats.bytes, 2.3 * stats.changed + 300 * stats.tensors)
            for h in holders:
                apply_blob(model_tensors(h), blobs[0], stats.version - 1)
                for name, value in export_bf16(model).items():
                    self.assertTrue(torch.equal(bits(model_tensors(h)[name]), value.view(torch.int16)), name)
        _, empty = publisher.publish(model)  # the publisher's copy advanced with every patch
        self.assertEqual((empty.changed, empty.tensors), (0, 0))


    def test_threaded_diff_equals_single_threaded(self):
        old = export_bf16(build_model(tiny_config(), seed=5, dtype=torch.bfloat16))
        model = build_model(tiny_config(), seed=5, dtype=torch.bfloat16)
        perturb_bf16(model, 0.05, seed=9, dense=next(iter(old)))
        new = export_bf16(model)
        threads = torch.get_num_threads()
        results = []
        try:
            for n in (1, 2):
                torch.set_num_threads(n)
                stats = PatchStats()
                results.append((diff_tensors(old, new, stats), (stats.tensors, stats.dense, stats.sparse, stats.changed)))
        finally:
            torch.set_num_threads(threads)
        (one, s1), (two, s2) = results
        self.assertEqual(s1, s2)
        self.assertEqual(list(one), list(two))
        for k in one:
            self.assertTrue(torch.equal(one[k].view(torch.uint8), two[k].view(torch.uint8)), k)


class ChunkedDecodeTest(unittest.TestCase):
    def test_chunks_equal_the_whole_decode_at_every_slice_size(self):
        g = np.random.default_rng(3)
        for trial in range(20):
            n = int(g.integers(1, 400))
            gaps = np.where(g.random(n) < 0.2, g.integers(128, 1 << 20, n), g.integers(0, 128, n))
            idx = np.cumsum(gaps)
            moves = np.where(g.random(n) < 0.1 * (trial % 2), g.integers(-30000, 30000, n), g.choice([-1, 1], n)).astype(np.int16)
            ib = encode_indices(torch.from_numpy(idx)).numpy()
            db = encode_deltas(torch.zeros(n, dtype=torch.int16), torch.from_numpy(moves)).numpy()
            for chunk in (1, 2, 3, 7, 64, 1 << 18):
                got = list(np_patch_chunks(ib, db, chunk))
                self.assertTrue(np.array_equal(np.concatenate([i for i, _ in got]), idx), f"trial {trial} chunk {chunk}")
                self.assertTrue(np.array_equal(np.concatenate([d for _, d in got]), moves), f"trial {trial} chunk {chunk}")
                self.assertTrue(all(i.size <= chunk for i, _ in got), f"trial {trial} chunk {chunk}")

    def test_bad_streams_are_refused_before_the_first_chunk(self):
        ib = encode_indices(torch.tensor([1, 5, 900, 2000])).numpy()
        db = encode_deltas(torch.zeros(4, dtype=torch.int16), torch.tensor([1, -1, 1, 1], dtype=torch.int16)).numpy()
        for bad_i, bad_d, says in ((ib, db[:3], "4 indices but 3 value deltas"),
                                   (ib[:-1], db, "index stream ends inside a varint"),
                                   (ib, np.append(db, np.uint8(0x81)), "delta stream ends inside a varint")):
            chunks = np_patch_chunks(bad_i, bad_d, 1)
            with self.assertRaises(EngineError) as ctx:
                next(chunks)
            self.assertIn(says, str(ctx.exception))


class PatchTest(unittest.TestCase):
    def test_patches_reproduce_exact_bf16_after_optimizer_steps(self):
        trainer_model = tiny_model(seed=11)
        trainer = Trainer(trainer_model, GRPOConfig(lr=2e-6, micro_batch_size=4))
        publisher = Publisher(max_shard_bytes=64 * 1024)
        rollout = build_model(tiny_config(), seed=99, dtype=torch.bfloat16)  # different weights on purpose
        targets = model_tensors(rollout)
        blobs, stats = publisher.publish(trainer_model)
        self.assertEqual(stats.kind, "full")
        self.assertGreater(len(blobs), 1)  # sharded
        version = None
        for blob in blobs:
            version = apply_blob(targets, blob).version
        batch = make_batch()
        kinds = []
        for step in range(4):
            trainer.step(batch)
            blobs, stats = publisher.publish(trainer_model)
            self.assertEqual(len(blobs), 1)
            kinds.append((stats.sparse, stats.dense))
            applied = apply_blob(targets, blobs[0], version)
            version = applied.version
            self.assertEqual((applied.sparse, applied.dense), (stats.sparse, stats.dense))
            expected = export_bf16(trainer_model)
            for name, value in expected.items():
                self.assertTrue(torch.equal(bits(targets[name]), value.view(torch.int16)), f"step {step} {name}")
            self.assertLess(stats.bytes, sum(v.numel() * 2 for v in expected.values()))
        self.assertTrue(all(sparse > 0 for sparse, _ in kinds), kinds)
        with torch.no_grad():
            tokens = batch.tokens[:2]
            torch.testing.assert_close(rollout(tokens).float(), trainer_model.to(torch.bfloat16)(tokens).float())

    def test_a_rebase_writes_over_the_kept_copy_and_stays_exact(self):
        trainer_model = tiny_model(seed=11)
        trainer = Trainer(trainer_model, GRPOConfig(lr=2e-6, micro_batch_size=4))
        publisher = Publisher(max_shard_bytes=64 * 1024)
        rollout = build_model(tiny_config(), seed=99, dtype=torch.bfloat16)
        targets = model_tensors(rollout)
        version = None
        for blob in publisher.publish(trainer_model)[0]:
            version = apply_blob(targets, blob).version
        kept = publisher.last
        pointers = {n: t.data_ptr() for n, t in kept.items()}
        batch = make_batch()
        trainer.step(batch)
        blobs, stats = publisher.publish(trainer_model, full=True)  # a re-base
        self.assertEqual(stats.kind, "full")
        # The kept copy is the same memory, now holding the new weights (not a second export).
        self.assertIs(publisher.last, kept)
        self.assertEqual({n: t.data_ptr() for n, t in publisher.last.items()}, pointers)
        for blob in blobs:
            version = apply_blob(targets, blob).version
        trainer.step(batch)
        patch, pstats = publisher.publish(trainer_model)  # diffed against the re-based copy
        self.assertEqual(pstats.kind, "patch")
        self.assertGreater(pstats.sparse, 0)
        apply_blob(targets, patch[0], version)
        fresh = export_bf16(trainer_model)
        for name, value in fresh.items():
            self.assertTrue(torch.equal(bits(targets[name]), value.view(torch.int16)), name)
            self.assertTrue(torch.equal(publisher.last[name].view(torch.int16), value.view(torch.int16)), name)

    def test_a_rebase_of_another_layout_exports_anew(self):
        publisher = Publisher()
        publisher.publish(tiny_model(seed=1))
        kept = publisher.last
        other = build_model(tiny_config(hidden_size=32, intermediate_size=64), seed=2, dtype=torch.bfloat16)
        publisher.publish(other, full=True)
        self.assertIsNot(publisher.last, kept)
        for name, value in export_bf16(other).items():
            self.assertEqual(publisher.last[name].shape, value.shape, name)
            self.assertTrue(torch.equal(publisher.last[name].view(torch.int16), value.view(torch.int16)), name)

    def test_dense_fallback_above_one_third(self):
        old = {"a": torch.zeros(300, dtype=torch.bfloat16), "b": torch.zeros(300, dtype=torch.bfloat16),
               "c": torch.zeros(4, 5, dtype=torch.bfloat16)}
        new = {k: v.clone() for k, v in old.items()}
        new["a"][:100] = 1.0  # exactly one third: sparse
        new["b"][:101] = 2.0  # more than a third: dense
        new["c"][0, 0] = -0.0  # a sign-bit-only change still counts (bit comparison)
        stats = PatchStats()
        entries = diff_tensors(old, new, stats)
        self.assertEqual(sorted(entries), ["a" + DLT, "a" + IDX, "b", "c" + DLT, "c" + IDX])
        self.assertEqual((stats.sparse, stats.dense, stats.changed), (2, 1, 202))
        self.assertEqual(entries["a" + IDX].numel(), 100)  # gaps of 1: one byte each
        blob = safetensors.serialize(entries, {"format": "hearth-patch", "version": "2", "base_version": "1"})
        copy = {k: v.clone() for k, v in old.items()}
        apply_blob(copy, blob, 1)
        for k in new:
            self.assertTrue(torch.equal(copy[k].view(torch.int16), new[k].view(torch.int16)), k)

    def test_bad_patches_are_clear_errors(self):
        target = {"a": torch.zeros(10, dtype=torch.bfloat16)}
        cases = [
            ({"zzz": torch.ones(10, dtype=torch.bfloat16)}, "unknown tensor"),
            ({"a" + IDX: encode_indices(torch.tensor([2, 40])),
              "a" + VAL: torch.ones(2, dtype=torch.bfloat16)}, "out of range"),
            ({"a" + IDX: encode_indices(torch.tensor([2])), "a" + VAL: torch.ones(3, dtype=torch.bfloat16)},
             "values do not match"),
        ]
        for entries, needle in cases:
            blob = safetensors.serialize(entries, {"format": "hearth-patch", "version": "2", "base_version": "1"})
            with self.assertRaises(EngineError) as ctx:
                apply_blob(target, blob, 1)
            self.assertEqual(ctx.exception.code, "bad_patch")
            self.assertIn(needle, str(ctx.exception))
        blob = safetensors.serialize({}, {"format": "hearth-patch", "version": "5", "base_version": "4"})
        with self.assertRaises(EngineError) as ctx:
            apply_blob(target, blob, 2)
        self.assertIn("version 4", str(ctx.exception))
        with self.assertRaises(EngineError) as ctx:
            apply_blob(target, b"\x00" * 3)
        self.assertEqual(ctx.exception.code, "bad_safetensors")


def mapped_rss_kib(mm: mmap.mmap) -> int:
    """Resident KiB of the mapping `mm` (from /proc/self/smaps, found by its address)."""
    addr = np.frombuffer(mm, dtype=np.uint8).__array_interface__["data"][0]
    with open("/proc/self/smaps") as f:
        text = f.read()
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        lo, hi = (int(x, 16) for x in block.split(" ", 1)[0].split("-"))
        if lo <= addr < hi:
            return int(re.search(r"^Rss:\s+(\d+) kB", block, re.M).group(1))
    raise AssertionError("mapping not found in smaps")


@unittest.skipUnless(sys.platform.startswith("linux"), "smaps and MADV_POPULATE_READ are Linux's")
class CatchUpTest(unittest.TestCase):
    """A late joiner's base and the patches after it, applied in one request."""

    def publications(self):
        """A sharded base and four patches (the second holds one tensor whole, the ones after
        it move that tensor again): the blobs and the publisher's last bf16 weights."""
        model = build_model(tiny_config(), seed=3, dtype=torch.bfloat16)
        publisher = Publisher(max_shard_bytes=64 * 1024)
        blobs, stats = publisher.publish(model)
        self.assertGreater(len(blobs), 1)
        dense = list(model_tensors(model))[2]
        for step, (share, d) in enumerate([(0.027, None), (0.05, dense), (0.01, None), (0.027, None)]):
            perturb_bf16(model, share, seed=step, dense=d)
            patch, pstats = publisher.publish(model)
            self.assertEqual((pstats.kind, pstats.dense), ("patch", 1 if d else 0))
            blobs += patch
        return blobs, len(blobs) - 4, export_bf16(model)

    def assertHolds(self, targets, want):
        for name, value in want.items():
            self.assertTrue(torch.equal(bits(targets[name]), value.view(torch.int16)), name)

    def test_a_base_and_its_patches_applied_together_are_the_publishers_bits(self):
        blobs, shards, want = self.publications()
        targets = model_tensors(build_model(tiny_config(), seed=4, dtype=torch.bfloat16))
        results = apply_blobs(targets, blobs)
        self.assertHolds(targets, want)
        self.assertEqual([r.kind for r in results], ["full"] * shards + ["patch"] * 4)
        self.assertEqual([r.version for r in results], [1] * shards + [2, 3, 4, 5])
        self.assertEqual(sum(r.tensors for r in results[:shards]), len(want))  # each blob counts what it holds
        self.assertTrue(all(r.changed > 0 and r.sparse > 0 for r in results[shards:]), [asdict(r) for r in results])
        self.assertEqual([r.dense for r in results[shards:]], [0, 1, 0, 0])

    def test_patches_applied_a_few_bytes_at_a_time_are_exact(self):
        # Slices that end inside most tensors' streams (and inside multi-byte gaps: each slice is extended to the end of its varint).
        blobs, _, want = self.publications()
        chunk = weights.PATCH_CHUNK_BYTES
        try:
            weights.PATCH_CHUNK_BYTES = 5
            targets = model_tensors(build_model(tiny_config(), seed=4, dtype=torch.bfloat16))
            apply_blobs(targets, blobs)
        finally:
            weights.PATCH_CHUNK_BYTES = chunk
        self.assertHolds(targets, want)

    def test_files_and_blobs_mixed_in_one_request_apply_in_order(self):
        blobs, shards, want = self.publications()
        targets = model_tensors(build_model(tiny_config(), seed=4, dtype=torch.float32))  # an fp32 holder too
        with tempfile.TemporaryDirectory() as d:
            sources = []
            for i, blob in enumerate(blobs[:shards]):
                path = os.path.join(d, f"shard{i}")
                with open(path, "wb") as f:
                    f.write(blob)
                sources.append({"path": path})
            # Two patches in one file, read at their offsets; the last two in the request itself.
            both = os.path.join(d, "patches")
            with open(both, "wb") as f:
                f.write(blobs[shards] + blobs[shards + 1])
            sources += [{"path": both, "offset": 0, "length": len(blobs[shards])},
                        {"path": both, "offset": len(blobs[shards]), "length": len(blobs[shards + 1])}]
            sources += [{"blob": b} for b in blobs[shards + 2:]]
            results = apply_sources(targets, sources)
        self.assertEqual(results[-1].version, 5)
        self.assertHolds(targets, want)

    def test_a_broken_chain_is_refused_before_any_tensor_is_written(self):
        blobs, shards, _ = self.publications()
        targets = model_tensors(build_model(tiny_config(), seed=4, dtype=torch.bfloat16))
        held = {n: bits(t).clone() for n, t in targets.items()}
        for bad, says in ((blobs[:-2] + blobs[-1:], "applies to version 4, holder has 3"),  # a patch left out
                          (blobs[:shards] + blobs[shards + 1:], "applies to version 2, holder has 1")):
            with self.assertRaises(EngineError) as ctx:
                apply_blobs(targets, bad)
            self.assertEqual(ctx.exception.code, "bad_patch")
            self.assertIn(says, str(ctx.exception))
            self.assertIn(f"of {len(bad)}", str(ctx.exception))  # which publication of the request
            for name, t in targets.items():
                self.assertTrue(torch.equal(bits(t), held[name]), f"{name} was written before the chain was checked")


class PopulateTest(unittest.TestCase):
    def test_a_mapped_source_is_mapped_in_at_once(self):
        with tempfile.NamedTemporaryFile() as f:
            f.write(os.urandom(4 << 20))
            f.flush()
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                self.assertEqual(mapped_rss_kib(mm), 0)  # nothing touched yet
                _populate(mm, (1 << 20) + 100, 2 << 20)  # a range that starts inside a page
                rss = mapped_rss_kib(mm)
                # At least the pages of [1 MiB + 100, 3 MiB + 100) are mapped now (with large folios the
                # kernel may map the rest of a folio too, so no upper bound).
                self.assertGreaterEqual(rss, 2048)
            finally:
                mm.close()


if __name__ == "__main__":
    unittest.main()
