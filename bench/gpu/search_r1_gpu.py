#!/usr/bin/env python3
"""Python parts of bench/gpu/search_r1_gpu.sh (run that script, not this file).

Subcommands:
  folder DIR --preset P [--tokenizer-dir D]   the random HF folder without node (the same
                                               engine code `hearth model init` runs)
  hotpot FILE                                  a small HotpotQA-format file for the smoke
  bench --model DIR --batch B --prompt P --new N --out OUT
                                               our generate vs transformers' on the folder's
                                               weights, and logit parity in fp32 and bf16
  report --out OUT                             merge the parts' JSON into search_r1_gpu.json
                                               and a table, search_r1_gpu.md

Every part records its error instead of aborting, so one failure leaves the rest.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sys
import time
import traceback
from typing import Any, Dict, Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "cluster-agent", "engine"))
sys.path.insert(0, HERE)

from engine_bench import fmt, free, logit_parity, random_prompts, time_generate, time_hf_generate  # noqa: E402
from hearth_engine import checkpoint, randinit  # noqa: E402
from hearth_engine.config import from_preset, load_config  # noqa: E402


def error(e: BaseException) -> Dict[str, str]:
    return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


def cmd_folder(a: argparse.Namespace) -> int:
    """config.json + seeded weights (randinit), plus the tokenizer files when given."""
    extra: Dict[str, Any] = {}
    eos = []
    if a.tokenizer_dir:
        with open(os.path.join(a.tokenizer_dir, "tokenizer.json"), encoding="utf-8") as f:
            added = {t["content"]: t["id"] for t in json.load(f).get("added_tokens", [])}
        with open(os.path.join(a.tokenizer_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            tc = json.load(f)
        eos = [added[t] for t in (tc.get("eos_token"), tc.get("pad_token")) if isinstance(t, str) and t in added]
        eos = list(dict.fromkeys(eos))
        if eos:
            extra["eos_token_id"] = eos[0]
        if isinstance(tc.get("pad_token"), str) and tc["pad_token"] in added:
            extra["pad_token_id"] = added[tc["pad_token"]]
    result = randinit.write_random_folder(from_preset(a.preset), a.dir, seed=a.seed, extra_config=extra)
    if a.tokenizer_dir:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(a.tokenizer_dir, name), os.path.join(a.dir, name))
        with open(os.path.join(a.dir, "generation_config.json"), "w", encoding="utf-8") as f:
            json.dump({**extra, "eos_token_id": eos}, f, indent=2)
    print(f"wrote {a.dir}: {a.preset}, {len(result['files'])} weight file(s) in {result['seconds']:.1f} s")
    return 0


def cmd_hotpot(a: argparse.Namespace) -> int:
    """Eight HotpotQA-format questions with two gold and two distractor paragraphs each."""
    facts = [("Marie Curie", "Warsaw", "physicist"), ("Alan Turing", "London", "mathematician"),
             ("Ada Lovelace", "London", "writer"), ("Niels Bohr", "Copenhagen", "physicist"),
             ("Rosalind Franklin", "London", "chemist"), ("Enrico Fermi", "Rome", "physicist"),
             ("Emmy Noether", "Erlangen", "mathematician"), ("Dmitri Mendeleev", "Tobolsk", "chemist")]
    items = []
    for i, (who, city, job) in enumerate(facts):
        other = facts[(i + 3) % len(facts)]
        items.append({
            "_id": f"gpu-smoke-{i}",
            "question": f"In which city was the {job} {who} born?",
            "answer": city,
            "type": "bridge", "level": "easy",
            "supporting_facts": [[who, 0], [city, 0]],
            "context": [
                [who, [f"{who} was a {job}.", f" {who} was born in {city}."]],
                [city, [f"{city} is a city in Europe.", f" Many scientists lived in {city}."]],
                [other[0], [f"{other[0]} was a {other[2]}.", f" {other[0]} was born in {other[1]}."]],
                [other[1], [f"{other[1]} is a city.", " It has a university."]],
            ],
        })
    with open(a.file, "w", encoding="utf-8") as f:
        json.dump(items, f, indent=1)
    print(f"wrote {a.file}: {len(items)} questions")
    return 0


def load_hf(model_dir: str, dtype: torch.dtype, device: torch.device):
    """transformers' Qwen2ForCausalLM read from the folder itself (proves the folder loads there)."""
    from transformers import AutoModelForCausalLM
    try:
        hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        hf = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype)
    return hf.to(device).eval()


def cmd_bench(a: argparse.Namespace) -> int:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(max(1, a.threads or (os.cpu_count() or 1)))
    cfg = load_config(a.model)
    res: Dict[str, Any] = {"model": a.model, "device": str(device), "torch": torch.__version__,
                           "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
                           else platform.processor() or "cpu", "params": cfg.num_params(),
                           "batch": a.batch, "prompt": a.prompt, "new": a.new}
    try:
        import transformers
        res["transformers"] = transformers.__version__
    except ImportError:
        res["transformers"] = None
        print("transformers not installed: the comparisons with transformers are skipped", file=sys.stderr)
    prompts = random_prompts(cfg.vocab_size, a.batch, a.prompt)
    probe = prompts[: min(4, a.batch), : min(64, a.prompt)]
    # Logit parity on the folder's weights: fp32 first, then both models cast to bf16.
    res["parity"] = {}
    ours = None
    try:
        t0 = time.perf_counter()
        ours = checkpoint.load_model(a.model, str(device), torch.float32).eval()
        res["load_fp32_s"] = time.perf_counter() - t0
        if res["transformers"]:
            hf = load_hf(a.model, torch.float32, device)
            res["parity"]["fp32"] = logit_parity(ours, hf, probe)
            hf = hf.to(torch.bfloat16)
            ours = ours.to(torch.bfloat16)
            res["parity"]["bf16"] = logit_parity(ours, hf, probe)
            del hf
        else:
            res["parity"] = {"skipped": "transformers not installed"}
    except Exception as e:  # noqa: BLE001 - record and continue
        res["parity"]["error"] = error(e)
    gen_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    ours = None
    free(device)
    try:
        ours = checkpoint.load_model(a.model, str(device), gen_dtype).eval()
        res["generate"] = time_generate(ours, prompts, a.new, device)
        res["generate"]["dtype"] = str(gen_dtype).replace("torch.", "")
    except Exception as e:  # noqa: BLE001
        res["generate"] = error(e)
    ours = None
    free(device)
    if res["transformers"]:
        try:
            hf = load_hf(a.model, gen_dtype, device)
            res["hf_generate"] = time_hf_generate(hf, prompts, a.new, device)
            del hf
            if "tok_per_s" in res.get("generate", {}):
                res["generate"]["speedup_vs_hf"] = res["generate"]["tok_per_s"] / res["hf_generate"]["tok_per_s"]
        except Exception as e:  # noqa: BLE001
            res["hf_generate"] = error(e)
    else:
        res["hf_generate"] = {"skipped": "transformers not installed"}
    gc.collect()
    free(device)
    with open(os.path.join(a.out, "bench.json"), "w", encoding="utf-8") as f:
        json.dump(res, f, indent=2, default=str)
    return 0


def read(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def table(res: Dict[str, Any]) -> str:
    b = res.get("bench") or {}
    g, hg = b.get("generate") or {}, b.get("hf_generate") or {}
    p = b.get("parity") or {}
    s = res.get("smoke") or {}
    m = res.get("model_init") or {}
    lines = [f"# Search-R1 GPU check ({res.get('preset')}, {b.get('device_name', '?')}, torch {b.get('torch')}, "
             f"transformers {b.get('transformers') or 'not installed'})", "",
             "| measure | hearth | transformers | ratio |", "|---|---|---|---|",
             f"| model init ({m.get('how', '?')}), s | {fmt(m.get('seconds'))} | | |",
             f"| generate batch {g.get('batch', b.get('batch'))} x ({g.get('prompt', b.get('prompt'))} + "
             f"{g.get('new', b.get('new'))}), tok/s | {fmt(g.get('tok_per_s'), '.0f')} | "
             f"{fmt(hg.get('tok_per_s'), '.0f')} | {fmt(g.get('speedup_vs_hf'), '.2f')}x |",
             f"| generate wall, s | {fmt(g.get('seconds'))} | {fmt(hg.get('seconds'))} | |",
             f"| decode ms/step (CUDA graph capture s) | {fmt(g.get('decode_ms_per_step'))} "
             f"({fmt(g.get('graph_capture_s'))}) | | |",
             f"| peak GB during generate | {fmt(g.get('peak_gb'))} | {fmt(hg.get('peak_gb'))} | |"]
    for dt in ("fp32", "bf16"):
        q = p.get(dt) or {}
        lines.append(f"| logits vs transformers {dt}: max abs diff (top-1 agree) | "
                     f"{fmt(q.get('max_abs_logit_diff'))} ({fmt(100 * q['top1_agreement'], '.1f') + ' %' if 'top1_agreement' in q else '–'}) | | |")
    lines.append(f"| 2-step Search-R1 smoke through the driver | {s.get('status', 'not run')} | | "
                 f"{fmt(s.get('seconds'))} s |")
    notes = [f"- {k}: {v['skipped']}" for k, v in (("parity", p), ("hf_generate", hg)) if isinstance(v, dict) and "skipped" in v]
    notes += [f"- {k} failed: {v['error']}" for k, v in (("parity", p), ("generate", g), ("hf_generate", hg))
              if isinstance(v, dict) and "error" in v]
    if s.get("detail"):
        notes.append(f"- smoke: {s['detail']}")
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def cmd_report(a: argparse.Namespace) -> int:
    res: Dict[str, Any] = {"preset": a.preset, "small": a.small,
                           "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for part in ("model_init", "bench", "smoke"):
        res[part] = read(os.path.join(a.out, f"{part}.json"))
    with open(os.path.join(a.out, "search_r1_gpu.json"), "w", encoding="utf-8") as f:
        json.dump(res, f, indent=2, default=str)
    text = table(res)
    with open(os.path.join(a.out, "search_r1_gpu.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("folder")
    f.add_argument("dir")
    f.add_argument("--preset", required=True)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--tokenizer-dir")
    h = sub.add_parser("hotpot")
    h.add_argument("file")
    b = sub.add_parser("bench")
    b.add_argument("--model", required=True)
    b.add_argument("--batch", type=int, required=True)
    b.add_argument("--prompt", type=int, required=True)
    b.add_argument("--new", type=int, required=True)
    b.add_argument("--threads", type=int, default=0)
    b.add_argument("--out", required=True)
    r = sub.add_parser("report")
    r.add_argument("--out", required=True)
    r.add_argument("--preset", required=True)
    r.add_argument("--small", action="store_true")
    a = ap.parse_args()
    return {"folder": cmd_folder, "hotpot": cmd_hotpot, "bench": cmd_bench, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
