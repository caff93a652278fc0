"""Weight publication at the 3B shape on one GPU (issue 22's GPU check).

A Qwen2.5-3B-shaped bf16 model on the GPU publishes through the engine's own
Publisher (diff + encode on the GPU, the blob copied to host); a second model on
the same GPU (the rollout engine's weights) applies every publication from the
host blob, and both are compared bit for bit after every step. A simulated
optimizer step moves a share of the bf16 values by one ulp (weights.perturb_bf16):
2.7 %, 0.5 %, 10 %, and 2.7 % with one tensor past a third (dense). The full
publication of the same model is timed beside them for the ratio.

    python3 bench/gpu/weights_bench.py --out /tmp/weights-gpu          # H200: qwen2.5-3b
    /usr/bin/python3 bench/gpu/weights_bench.py --small --out /tmp/w   # CPU: qwen2-tiny

Writes OUT/weights_bench.json and OUT/weights_bench.md. Each step records its
error instead of aborting the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "cluster-agent", "engine"))

import torch  # noqa: E402

from hearth_engine import config as config_mod  # noqa: E402
from hearth_engine.model import build_model  # noqa: E402
from hearth_engine.weights import (Publisher, apply_blob, export_bf16, model_tensors,  # noqa: E402
                                   perturb_bf16)

REFERENCE_BYTES_PER_CHANGE = 6  # int32 index + bf16 value
DENSE = "model.layers.0.mlp.gate_proj.weight"


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def identical(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    ea, eb = export_bf16(a), export_bf16(b)
    return all(torch.equal(ea[n].view(torch.int16), eb[n].view(torch.int16)) for n in ea)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="qwen2-tiny on CPU (a check of the script)")
    ap.add_argument("--out", default="./gpu-out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    device = "cpu" if args.small or not torch.cuda.is_available() else "cuda"
    preset = "qwen2-tiny" if args.small else "qwen2.5-3b"
    cfg = config_mod.resolve(preset)
    result = {"preset": preset, "device": device, "torch": torch.__version__, "steps": []}
    t = time.perf_counter()
    trainer = build_model(cfg, 0, device, torch.bfloat16)
    rollout = build_model(cfg, 1, device, torch.bfloat16)
    sync(device)
    result["build_s"] = time.perf_counter() - t
    result["params"] = sum(p.numel() for p in model_tensors(trainer).values())
    publisher = Publisher()
    targets = model_tensors(rollout)
    steps = [("first publication (full)", 0.0, None, False), ("full-weights path, 2.7 %", 0.027, None, True),
             ("patch 2.7 %", 0.027, None, False), ("patch 0.5 %", 0.005, None, False),
             ("patch 10 %", 0.1, None, False), ("patch 2.7 % + one tensor 40 % (dense)", 0.027, DENSE, False)]
    for seed, (name, share, dense, full) in enumerate(steps):
        row = {"name": name, "share": share}
        try:
            if share:
                t = time.perf_counter()
                perturb_bf16(trainer, share, seed, dense)
                sync(device)
                row["perturb_s"] = time.perf_counter() - t
            t0 = time.perf_counter()
            blobs, stats = publisher.publish(trainer, full=full)
            sync(device)
            t1 = time.perf_counter()
            for blob in blobs:
                apply_blob(targets, blob)
            sync(device)
            t2 = time.perf_counter()
            row.update(kind=stats.kind, bytes=stats.bytes, changed=stats.changed, elements=stats.elements,
                       dense=stats.dense, sparse=stats.sparse, publish_s=t1 - t0, apply_s=t2 - t1, total_s=t2 - t0,
                       engine_s=stats.seconds, bytes_per_changed=stats.bytes / max(1, stats.changed),
                       identical=identical(trainer, rollout))
            del blobs
        except Exception as e:  # noqa: BLE001 - record and go on
            row["error"] = f"{type(e).__name__}: {e}"
            row["traceback"] = traceback.format_exc()
        result["steps"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "traceback"}), flush=True)
    if device.startswith("cuda"):
        result["peak_gpu_bytes"] = torch.cuda.max_memory_allocated()
    with open(os.path.join(args.out, "weights_bench.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = [f"# weights bench: {preset} ({result['params'] / 1e6:.1f} M params) on {device}", "",
             "| step | kind | MB | changed % | B/changed (ref 6) | publish s | apply s | total s | identical |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["steps"]:
        if "error" in r:
            lines.append(f"| {r['name']} | error: {r['error']} | | | | | | | |")
            continue
        lines.append(f"| {r['name']} | {r['kind']} | {r['bytes'] / 1e6:.1f} | {100 * r['changed'] / r['elements']:.2f} | "
                     f"{r['bytes_per_changed']:.2f} | {r['publish_s']:.3f} | {r['apply_s']:.3f} | {r['total_s']:.3f} | "
                     f"{'yes' if r['identical'] else 'NO'} |")
    with open(os.path.join(args.out, "weights_bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r.get("identical") for r in result["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
