#!/usr/bin/env bash
# Healthy 2-rank runs under a background load (issue 39's timeout_s measurement): starts LOAD
# busy loops, runs N tiny 5-step runs at parallel.timeout_s T through ulysses-run, stops the
# loops and prints how many finished. Exit 0 when all did, 1 otherwise, 2 on bad usage.
#   tools/loaded-runs.sh [T=1] [N=20] [LOAD=4] [BUILD=build]
set -u
T="${1:-1}"; N="${2:-20}"; LOAD="${3:-4}"; BUILD="${4:-build}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$REPO/$BUILD/app/run/ulysses-run"; WORKER="$REPO/$BUILD/app/worker/ulysses-worker"
[ -x "$RUN" ] && [ -x "$WORKER" ] || { echo "loaded-runs: build ulysses-run and ulysses-worker in $BUILD first" >&2; exit 2; }
tmp="$(mktemp -d)"
cat > "$tmp/tiny.json" <<JSON
{"model": {"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2},
 "parallel": {"sp_size": 2, "dp_size": 1, "timeout_s": $T},
 "train": {"seq_length": 64, "steps": 5, "lr": 0.01, "warmup_steps": 1, "min_lr": 0.001, "threads_per_rank": 1},
 "data": {"kind": "text", "path": "$REPO/resources/data/tiny_corpus.txt"}}
JSON
pids=()
for _ in $(seq 1 "$LOAD"); do (while :; do :; done) & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
ok=0
for i in $(seq 1 "$N"); do
  if "$RUN" "$tmp/tiny.json" --worker "$WORKER" --out "$tmp/r$i" > "$tmp/r$i.log" 2>&1; then
    ok=$((ok + 1))
  else
    echo "run $i failed: $(grep -m1 'stopped making progress\|exited with' "$tmp/r$i.log")"
  fi
done
echo "timeout_s=$T: $ok of $N healthy runs finished under a load of $LOAD busy loops on $(nproc) cores"
[ "$ok" = "$N" ] && rm -rf "$tmp"
[ "$ok" = "$N" ]
