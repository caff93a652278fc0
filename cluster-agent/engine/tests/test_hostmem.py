"""Model weights in one huge-page buffer (hostmem.pack_weights): values, ties and dtypes
kept, the kernel asked for huge pages, and a node's file read straight into them."""

import os
import tempfile
import unittest

import torch

from helpers import tiny_config
from hearth_engine import hostmem, weights
from hearth_engine.model import Transformer, build_model
from hearth_engine.synthetic import build_synthetic
from hearth_engine.weights import Publisher, apply_sources, model_tensors


def vm_flags(addr: int) -> str:
    """VmFlags of the mapping of this process that holds `addr`."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "VmFlags:":
                return line
    raise AssertionError(f"no mapping holds {addr:#x}")


class PackTest(unittest.TestCase):
    def test_a_built_model_lies_in_one_advised_buffer_with_its_values_and_ties(self):
        cfg = tiny_config()
        plain = Transformer(cfg).init_weights(5)  # torch's own allocation, fp32
        model = build_model(cfg, seed=5, dtype=torch.bfloat16)
        params = list(model.parameters())
        self.assertTrue(all(hostmem.is_packed(p) for p in params))
        self.assertFalse(hostmem.is_packed(torch.zeros(4)))
        for (name, a), (_, b) in zip(plain.named_parameters(), model.named_parameters()):
            self.assertEqual(b.dtype, torch.bfloat16, name)
            self.assertTrue(torch.equal(a.detach().to(torch.bfloat16), b.detach()), name)
        if cfg.tie_word_embeddings:
            self.assertIs(model.lm_head.weight, model.model.embed_tokens.weight)
        # One buffer, each tensor 64-byte aligned, in parameter order, no overlaps.
        ptrs = sorted((p.data_ptr(), p.numel() * p.element_size()) for p in params)
        self.assertTrue(all(a % 64 == 0 for a, _ in ptrs))
        self.assertTrue(all(a + n <= b for (a, n), (b, _) in zip(ptrs, ptrs[1:])))
        self.assertLess(ptrs[-1][0] - ptrs[0][0], 2 * sum(n for _, n in ptrs) + (4 << 20))
        # The kernel was asked for huge pages there ("hg": MADV_HUGEPAGE).
        self.assertIn(" hg", vm_flags(params[0].data_ptr()))

    def test_training_moves_the_packed_parameters(self):
        model = build_model(tiny_config(), seed=5, dtype=torch.float32)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model(torch.randint(0, 256, (2, 8))).float().pow(2).mean().backward()
        opt.step()
        moved = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
        self.assertGreater(len(moved), len(before) // 2)
        self.assertTrue(all(hostmem.is_packed(p) for p in model.parameters()))

    def test_synthetic_weights_are_packed(self):
        w = build_synthetic(3 << 20, seed=1, device="cpu", random=True, tensor_elements=1 << 19)
        self.assertTrue(all(hostmem.is_packed(p) for p in w.parameters()))


class FileReadTest(unittest.TestCase):
    def test_a_base_in_a_file_is_read_into_packed_targets_and_copied_into_others(self):
        model = build_model(tiny_config(), seed=3, dtype=torch.bfloat16)
        blobs, _ = Publisher(max_shard_bytes=64 * 1024).publish(model)
        want = {n: t.detach().clone() for n, t in model_tensors(model).items()}
        reads = []
        read_into = weights._FileAt.read_into
        weights._FileAt.read_into = lambda self, dst: (reads.append(dst.data_ptr()), read_into(self, dst))[1]
        try:
            with tempfile.TemporaryDirectory() as d:
                sources = []
                for i, blob in enumerate(blobs):
                    path = os.path.join(d, f"shard{i}")
                    with open(path, "wb") as f:
                        f.write(blob)
                    sources.append({"path": path})
                packed = model_tensors(build_model(tiny_config(), seed=4, dtype=torch.bfloat16))
                apply_sources(packed, sources)
                self.assertEqual(len(reads), len(want))  # every tensor read from its file
                plain = {n: torch.zeros_like(t, memory_format=torch.contiguous_format).clone() for n, t in want.items()}
                self.assertFalse(any(hostmem.is_packed(t) for t in plain.values()))
                reads.clear()
                apply_sources(plain, sources)
                self.assertEqual(reads, [])  # 4 KiB pages: copied out of the mapping instead
        finally:
            weights._FileAt.read_into = read_into
        for name, value in want.items():
            self.assertTrue(torch.equal(packed[name].view(torch.int16), value.view(torch.int16)), name)
            self.assertTrue(torch.equal(plain[name].view(torch.int16), value.view(torch.int16)), name)

    def test_a_file_cut_short_while_it_is_read_is_an_error(self):
        model = build_model(tiny_config(), seed=3, dtype=torch.bfloat16)
        blob = Publisher(max_shard_bytes=1 << 30).publish(model)[0][0]
        targets = model_tensors(build_model(tiny_config(), seed=4, dtype=torch.bfloat16))
        with tempfile.NamedTemporaryFile() as f:
            f.write(blob)
            f.flush()
            read_into = weights._FileAt.read_into

            def cut_then_read(self, dst):
                os.truncate(f.name, self.offset + 10)  # the node's file shrinks under the reader
                return read_into(self, dst)
            weights._FileAt.read_into = cut_then_read
            try:
                with self.assertRaises(weights.EngineError) as ctx:
                    apply_sources(targets, [{"path": f.name}])
            finally:
                weights._FileAt.read_into = read_into
        self.assertEqual(ctx.exception.code, "bad_patch")
        self.assertIn("cut short", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
