#!/usr/bin/env bash
# The 50-step loss curve of bf16 training at ZeRO stage 3 on CPU ranks (the tiny demo model on
# its byte-level corpus, sp 2 x dp 2 = 4 Gloo ranks), three ways side by side: fp32 unit
# gradients (train.grad_accum_dtype=float32, before the cut), bf16 unit gradients reduced in
# fp32 (the default) and in bf16 (train.grad_reduce_dtype=bfloat16). docs/ZERO.md quotes it.
# Usage: tools/grad_reduce_curve.sh [BUILD_DIR] [STEPS]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-50}"
run="$build/app/run/ulysses-run"
worker="$build/app/worker/ulysses-worker"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
common=(--set parallel.dp_size=2 --set train.zero_stage=3 --set train.dtype=bfloat16 --set "train.steps=$steps"
        --set profile.enabled=false)
declare -A sets=(
  [fp32_unit_grads]="train.grad_accum_dtype=float32"
  [bf16_fp32_wire]="train.grad_reduce_dtype=float32"
  [bf16_bf16_wire]="train.grad_reduce_dtype=bfloat16"
)
for name in fp32_unit_grads bf16_fp32_wire bf16_bf16_wire; do
  (cd "$root" && "$run" resources/configs/tiny.json --worker "$worker" --out "$out/$name" "${common[@]}" \
     --set "${sets[$name]}" > "$out/$name.log" 2>&1) || { cat "$out/$name.log"; exit 1; }
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
names = ["fp32_unit_grads", "bf16_fp32_wire", "bf16_bf16_wire"]
loss = {n: [json.loads(l)["loss"] for l in open(f"{out}/{n}/metrics.jsonl") if '"loss"' in l] for n in names}
print(f"{'step':>5} " + " ".join(f"{n:>16}" for n in names))
for s in range(len(loss[names[0]])):
    if s in (0, 1, 4) or (s + 1) % 10 == 0:
        print(f"{s + 1:>5} " + " ".join(f"{loss[n][s]:16.6f}" for n in names))
ref = loss[names[0]]
for n in names[1:]:
    d = [abs(a - b) / abs(b) for a, b in zip(loss[n], ref)]
    tail = sum(loss[n][-10:]) / 10
    print(f"{n}: max |loss - fp32_unit_grads| / loss = {max(d):.2e}, mean of the last 10 = {tail:.6f} "
          f"(fp32_unit_grads {sum(ref[-10:]) / 10:.6f})")
PY
