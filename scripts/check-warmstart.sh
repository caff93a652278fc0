#!/usr/bin/env bash
# Regenerates the shipped starting policy (policies/tiny-chain) with the recipe's
# full settings into a temporary folder, on a local cluster of its own, and
# compares the weights' digest with the shipped one. Not part of CI (about two
# minutes on 2 cores). Equal digests need the same torch build and BLAS as the
# machine that made the shipped policy (docs/searchr1.md, "The starting policy").
# Usage: bash scripts/check-warmstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
npm run build >/dev/null
tmp=$(mktemp -d)
export HEARTH_HOME="$tmp/home"
trap 'node dist/cluster-agent/cli.js down >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
node dist/cluster-agent/cli.js warmstart --out "$tmp/policy"
node --input-type=module -e '
import { readFileSync } from "node:fs";
const [shipped, made] = process.argv.slice(1).map((d) => JSON.parse(readFileSync(`${d}/warmstart.json`, "utf8")));
console.log(`shipped: recipe ${shipped.hash}, model.safetensors ${shipped.files["model.safetensors"]}, BLAS ${shipped.blas ?? "(not recorded)"}`);
console.log(`made:    recipe ${made.hash}, model.safetensors ${made.files["model.safetensors"]}, BLAS ${made.blas ?? "(not recorded)"}`);
if (shipped.hash !== made.hash) { console.log("the recipe changed since the shipped policy was made: run npm run warmstart"); process.exit(1); }
const same = Object.keys(made.files).filter((f) => made.files[f] === shipped.files[f]);
console.log(`files equal: ${same.join(", ") || "none"}`);
process.exit(same.length === Object.keys(made.files).length ? 0 : 1);
' policies/tiny-chain "$tmp/policy"
