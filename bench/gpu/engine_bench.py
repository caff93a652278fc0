#!/usr/bin/env python3
"""Tensor engine benchmark: generation, GRPO train step and weight deltas, each
against Hugging Face transformers run in the same process on the same weights.

GPU (the H200 run, one go, a few minutes):
    python3 bench/gpu/engine_bench.py --out /tmp/bench-out
CPU smoke run (tiny shape; HF parts are skipped when transformers is absent):
    /usr/bin/python3 bench/gpu/engine_bench.py --small --out /tmp/bench-cpu

Writes OUT/engine_bench.json and OUT/engine_bench.md (a short table). Every part is
guarded: a failing part records its error and the rest still runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
import traceback
from typing import Any, Callable, Dict, Optional

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "cluster-agent", "engine"))

from hearth_engine.config import ModelConfig, from_preset  # noqa: E402
from hearth_engine.generate import SamplingParams, generate  # noqa: E402
from hearth_engine.grpo import GRPOConfig, TrainBatch, Trainer  # noqa: E402
from hearth_engine.model import Transformer, build_model  # noqa: E402
from hearth_engine.weights import Publisher, apply_blob  # noqa: E402

FULL = dict(preset="qwen2.5-3b", batch=350, prompt=256, new=128, train_rows=88, train_len=1024, micro=8)
SMALL = dict(preset="tiny", batch=8, prompt=32, new=16, train_rows=8, train_len=64, micro=4)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, fn: Callable[[], Any]) -> "tuple[Any, float]":
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def peak_gb(device: torch.device) -> Optional[float]:
    return torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None


def hf_model(cfg: ModelConfig, ours: Transformer, device: torch.device, dtype: torch.dtype):
    """A transformers Qwen2ForCausalLM holding exactly our weights (names match)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    hf_cfg = Qwen2Config(**{k: v for k, v in cfg.to_hf().items() if k not in ("architectures", "torch_dtype", "model_type")})
    if hasattr(torch.device(device.type), "__enter__"):
        with torch.device(device):
            model = Qwen2ForCausalLM(hf_cfg)
    else:
        model = Qwen2ForCausalLM(hf_cfg).to(device)
    model = model.to(dtype)
    result = model.load_state_dict(ours.state_dict(), strict=False)
    missing = [k for k in result.missing_keys if "rotary" not in k]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"HF load: missing {missing[:5]} unexpected {result.unexpected_keys[:5]}")
    return model


def random_prompts(vocab: int, batch: int, length: int) -> torch.Tensor:
    """Seeded random prompt ids (batch, length): the same in every run and for every engine."""
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))


def time_generate(model: Transformer, prompts: torch.Tensor, new: int, device: torch.device) -> Dict[str, Any]:
    """Our batched sampling of exactly `new` tokens per row (no eos), after a warm-up call."""
    rows = prompts.tolist()
    params = SamplingParams(max_new_tokens=new, temperature=1.0, top_p=1.0, seed=1)
    generate(model, rows, SamplingParams(max_new_tokens=4, seed=1))  # warm kernels and allocator
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    (session, out), wall = timed(device, lambda: generate(model, rows, params))
    t = session.timings
    new_tokens = sum(len(r.tokens) for r in out)
    return {
        "batch": len(rows), "prompt": prompts.shape[1], "new": new, "new_tokens": new_tokens,
        "seconds": wall, "tok_per_s": new_tokens / wall, "prefill_s": t["prefill"],
        "decode_s": t["decode"], "decode_steps": t["decode_steps"], "graph_capture_s": t["graph_capture"],
        "decode_ms_per_step": 1e3 * (t["decode"] - t["graph_capture"]) / max(t["decode_steps"], 1),
        "decode_tok_per_s": len(rows) * t["decode_steps"] / max(t["decode"] - t["graph_capture"], 1e-9),
        "peak_gb": peak_gb(device),
    }


def time_hf_generate(hf: Any, prompts: torch.Tensor, new: int, device: torch.device) -> Dict[str, Any]:
    """transformers' `generate` sampling exactly `new` tokens per row, after a warm-up call."""
    ids = prompts.to(device)
    kw = dict(attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
              pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        hf.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        out_hf, hf_wall = timed(device, lambda: hf.generate(ids, max_new_tokens=new, min_new_tokens=new, **kw))
    hf_new = (out_hf.shape[1] - ids.shape[1]) * ids.shape[0]
    return {"seconds": hf_wall, "new_tokens": hf_new, "tok_per_s": hf_new / hf_wall, "peak_gb": peak_gb(device)}


def logit_parity(model: Transformer, hf: Any, probe: torch.Tensor) -> Dict[str, float]:
    """Max |our logits - transformers' logits| and top-1 agreement on the same tokens."""
    probe = probe.to(model.lm_head.weight.device)
    with torch.no_grad():
        a, b = model(probe).float(), hf(input_ids=probe).logits.float()
    return {"max_abs_logit_diff": float((a - b).abs().max()),
            "mean_abs_logit_diff": float((a - b).abs().mean()),
            "max_abs_logit": float(b.abs().max()),
            "top1_agreement": float((a.argmax(-1) == b.argmax(-1)).float().mean())}


def bench_generate(args, cfg: ModelConfig, device: torch.device, res: Dict[str, Any]) -> None:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = build_model(cfg, seed=0, device=str(device), dtype=dtype).eval()
    prompts = random_prompts(cfg.vocab_size, args.batch, args.prompt)
    res["generate"] = time_generate(model, prompts, args.new, device)
    free(device)
    if args.skip_hf:
        return
    try:
        hf = hf_model(cfg, model, device, dtype).eval()
        res["parity"] = logit_parity(model, hf, prompts[:4, :64])
        res["hf_generate"] = time_hf_generate(hf, prompts, args.new, device)
        res["generate"]["speedup_vs_hf"] = res["generate"]["tok_per_s"] / res["hf_generate"]["tok_per_s"]
        del hf
    except Exception as e:  # noqa: BLE001 - record and continue
        res["hf_generate"] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    del model
    free(device)


def train_batch(cfg: ModelConfig, rows: int, length: int, prompt: int) -> TrainBatch:
    """Prompt masked, a retrieved span masked, the rest generated; per-row advantages."""
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, cfg.vocab_size, (rows, length), generator=gen)
    mask = torch.zeros(rows, length, dtype=torch.bool)
    mask[:, prompt:] = True
    mask[:, prompt + (length - prompt) // 3: prompt + (length - prompt) // 2] = False
    adv = torch.randn(rows, 1, generator=gen).expand(rows, length).contiguous()
    old = -2.0 + 0.05 * torch.randn(rows, length, generator=gen)
    return TrainBatch(tokens, mask, adv, old)


def bench_train(args, cfg: ModelConfig, device: torch.device, res: Dict[str, Any]) -> None:
    model = build_model(cfg, seed=0, device=str(device), dtype=torch.float32)
    is_gpu = device.type == "cuda"
    trainer = Trainer(model, GRPOConfig(lr=1e-6, kl_coef=0.001, micro_batch_size=args.micro,
                                        checkpointing=is_gpu))
    batch = train_batch(cfg, args.train_rows, args.train_len, min(256, args.train_len // 4))
    tokens = args.train_rows * args.train_len
    publisher = Publisher(max_shard_bytes=2 << 30)
    (blobs, full), full_wall = timed(device, lambda: publisher.publish(model))
    res["publish_full"] = {"seconds": full_wall, "bytes": full.bytes, "shards": len(blobs)}
    del blobs
    replica = {k: v.clone() for k, v in publisher.last.items()}  # a rollout's bf16 weights
    if is_gpu:
        torch.cuda.reset_peak_memory_stats(device)
    trainer.step(batch)  # warm-up step (allocates AdamW state)
    metrics, wall = timed(device, lambda: trainer.step(batch))
    res["train"] = {"rows": args.train_rows, "len": args.train_len, "seconds": wall, "tok_per_s": tokens / wall,
                    "loss": metrics["loss"], "peak_gb": peak_gb(device)}
    (blobs, patch), patch_wall = timed(device, lambda: publisher.publish(model))
    stats, apply_wall = timed(device, lambda: [apply_blob(replica, b) for b in blobs])
    exact = all(torch.equal(replica[k].view(torch.int16), v.view(torch.int16)) for k, v in publisher.last.items())
    res["publish_patch"] = {"seconds": patch_wall, "bytes": patch.bytes, "changed": patch.changed,
                            "elements": patch.elements, "changed_frac": patch.changed / patch.elements,
                            "dense_tensors": patch.dense, "sparse_tensors": patch.sparse,
                            "int32_index_bytes": patch.changed * 6, "full_bf16_bytes": patch.elements * 2,
                            "detail_s": patch.seconds, "apply_s": apply_wall, "exact": exact}
    del trainer, model, replica, publisher, blobs
    free(device)
    if args.skip_hf:
        return
    try:
        base = build_model(cfg, seed=0, device=str(device), dtype=torch.float32)
        hf = hf_model(cfg, base, device, torch.float32)
        del base
        if is_gpu:
            hf.gradient_checkpointing_enable()
            torch.cuda.reset_peak_memory_stats(device)
        hf.train()
        opt = torch.optim.AdamW(hf.parameters(), lr=1e-6)

        def hf_step() -> float:
            opt.zero_grad()
            n = float(batch.mask[:, 1:].sum())
            total = 0.0
            for i in range(0, args.train_rows, args.micro):
                tok = batch.tokens[i: i + args.micro].to(device)
                m = batch.mask[i: i + args.micro, 1:].to(device)
                ctx = torch.autocast("cuda", dtype=torch.bfloat16) if is_gpu else torch.autocast("cpu", enabled=False)
                with ctx:
                    logits = hf(input_ids=tok).logits[:, :-1].float()
                nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tok[:, 1:], reduction="none")
                loss = (nll * m).sum() / n
                loss.backward()
                total += float(loss)
            torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
            opt.step()
            return total

        hf_step()
        _, hf_wall = timed(device, hf_step)
        res["hf_train"] = {"seconds": hf_wall, "tok_per_s": tokens / hf_wall, "peak_gb": peak_gb(device)}
        res["train"]["speedup_vs_hf"] = hf_wall / res["train"]["seconds"]
        del hf, opt
    except Exception as e:  # noqa: BLE001
        res["hf_train"] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    free(device)


def fmt(v: Any, spec: str = ".3g") -> str:
    return "–" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def table(res: Dict[str, Any]) -> str:
    g, hg = res.get("generate", {}), res.get("hf_generate", {})
    t, ht = res.get("train", {}), res.get("hf_train", {})
    pf, pp = res.get("publish_full", {}), res.get("publish_patch", {})
    lines = [
        f"# Tensor engine benchmark ({res['shape']}, {res['device_name']}, torch {res['torch']})", "",
        "| measure | hearth | HF transformers | ratio |", "|---|---|---|---|",
        f"| generate end to end, tok/s | {fmt(g.get('tok_per_s'), '.0f')} | {fmt(hg.get('tok_per_s'), '.0f')} | {fmt(g.get('speedup_vs_hf'), '.2f')}x |",
        f"| prefill, s | {fmt(g.get('prefill_s'))} | | |",
        f"| decode, ms/step (tok/s) | {fmt(g.get('decode_ms_per_step'))} ({fmt(g.get('decode_tok_per_s'), '.0f')}) | | |",
        f"| CUDA graph capture, s | {fmt(g.get('graph_capture_s'))} | | |",
        f"| GRPO train step, s (tok/s) | {fmt(t.get('seconds'))} ({fmt(t.get('tok_per_s'), '.0f')}) | {fmt(ht.get('seconds'))} ({fmt(ht.get('tok_per_s'), '.0f')}) | {fmt(t.get('speedup_vs_hf'), '.2f')}x |",
        f"| publish full, s / MB | {fmt(pf.get('seconds'))} / {fmt((pf.get('bytes') or 0) / 1e6, '.1f')} | | |",
        f"| publish patch, s / MB | {fmt(pp.get('seconds'))} / {fmt((pp.get('bytes') or 0) / 1e6, '.1f')} | | changed {fmt(100 * (pp.get('changed_frac') or 0), '.2f')} % |",
        f"| apply patch, s (exact) | {fmt(pp.get('apply_s'))} ({pp.get('exact')}) | | |",
    ]
    if "parity" in res:
        lines.append(f"\nLogit parity vs HF: max |diff| {fmt(res['parity']['max_abs_logit_diff'])}, "
                     f"top-1 agreement {fmt(100 * res['parity']['top1_agreement'], '.1f')} %.")
    errors = [k for k, v in res.items() if isinstance(v, dict) and "error" in v]
    if errors:
        failed = ", ".join(k + ": " + str(res[k]["error"]) for k in errors)
        lines.append(f"\nFailed parts: {failed}")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for engine_bench.json and engine_bench.md")
    ap.add_argument("--small", action="store_true", help="tiny shape for a CPU smoke run")
    ap.add_argument("--skip-hf", action="store_true", help="do not run the transformers baselines")
    ap.add_argument("--parts", default="generate,train", help="comma list: generate,train")
    for k in FULL:
        ap.add_argument(f"--{k.replace('_', '-')}", type=type(FULL[k]), default=None)
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu" and not args.small:
        print("no CUDA: using --small", file=sys.stderr)
        args.small = True
    for k, v in (SMALL if args.small else FULL).items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if device.type == "cpu":
        torch.set_num_threads(os.cpu_count() or 1)
    if not args.skip_hf:
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("transformers not importable: skipping HF baselines", file=sys.stderr)
            args.skip_hf = True
    cfg = from_preset(args.preset)
    res: Dict[str, Any] = {
        "shape": args.preset, "config": cfg.to_hf(), "params": cfg.num_params(), "torch": torch.__version__,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "threads": torch.get_num_threads(), "args": vars(args), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if not args.skip_hf:
        import transformers
        res["transformers"] = transformers.__version__
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    for part, fn in (("generate", bench_generate), ("train", bench_train)):
        if part not in args.parts.split(","):
            continue
        try:
            fn(args, cfg, device, res)
        except Exception as e:  # noqa: BLE001 - keep what was measured
            res[part + "_error"] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        free(device)
        with open(os.path.join(args.out, "engine_bench.json"), "w") as f:
            json.dump(res, f, indent=2, default=str)
    res["seconds"] = time.perf_counter() - t0
    with open(os.path.join(args.out, "engine_bench.json"), "w") as f:
        json.dump(res, f, indent=2, default=str)
    text = table(res)
    with open(os.path.join(args.out, "engine_bench.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
