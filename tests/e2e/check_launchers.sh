#!/bin/bash
# Launchers: ulysses-worker started by torchrun (Debian's python3-torch
# torch.distributed.run, --no_python) and by examples/slurm/ulysses.sbatch (Slurm's
# variables faked: fake srun and scontrol on PATH) give the same per-step losses as
# ulysses-run on the same config (1e-6 relative: same math, same data, same rank layout).
#   check_launchers.sh torchrun NPROC PYTHON RUN_BIN WORKER_BIN SRC_DIR
#   check_launchers.sh slurm    NPROC -      RUN_BIN WORKER_BIN SRC_DIR
set -euo pipefail
mode=$1 np=$2 py=$3 run=$4 worker=$5 src=$6
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Reference: ulysses-run (it also writes the resolved config the others start from).
"$run" resources/configs/tiny.json --set parallel.sp_size="$np" --set train.steps=3 --set train.seq_length=64 \
  --set profile.enabled=false --set train.threads_per_rank=1 --json --out "$tmp/ref" > "$tmp/ref.jsonl"
cfg=$tmp/ref/config.json

case "$mode" in
  torchrun)
    # Debian's python3-torch lives in /usr/bin/python3, which may not be the first python3.
    for cand in "$py" /usr/bin/python3 python3; do
      if "$cand" -c 'import torch.distributed.run' 2> /dev/null; then py=$cand; break; fi
      py=
    done
    [ -n "$py" ] || { echo "SKIP: no python with torch.distributed.run (install python3-torch)"; exit 77; }
    mkdir -p "$tmp/got"
    # --redirects/--tee "1": torch 1.13 on Python >= 3.11 cannot parse their default "0"
    # (Std.NONE is not iterated in a Flag enum), so stdout is redirected to its log dir.
    # c10d rendezvous: the workers get their own MASTER_PORT (static rendezvous hands them
    # the agent's store port with TORCHELASTIC_USE_AGENT_STORE, which the worker does not use).
    # torch_store_compat: torchrun's rendezvous stores on a torch 2.x without libuv (Debian 13).
    "$py" -c 'import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); import torch_store_compat
torch_store_compat.patch(); sys.argv[0] = "torchrun"; runpy.run_module("torch.distributed.run", run_name="__main__")' \
      "$src/tools/python" --redirects 1 --tee 1 --log_dir "$tmp/trlog" --nnodes 1 --nproc_per_node "$np" \
      --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$(free_port)" --rdzv_id "ulysses$$" \
      --no_python "$worker" --config "$cfg" --out "$tmp/got" > "$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    ;;
  slurm)
    # Fake Slurm: scontrol prints this host; srun starts SLURM_NTASKS local tasks with
    # SLURM_PROCID / SLURM_LOCALID set, as srun does on one node.
    mkdir -p "$tmp/bin"
    cat > "$tmp/bin/scontrol" <<'SC'
#!/bin/bash
[ "$1 $2" = "show hostnames" ] && { echo localhost; exit 0; }
exit 1
SC
    cat > "$tmp/bin/srun" <<'SR'
#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((r = 0; r < SLURM_NTASKS; r++)); do SLURM_PROCID=$r SLURM_LOCALID=$r "$@" & pids+=($!); done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
SR
    chmod +x "$tmp/bin/scontrol" "$tmp/bin/srun"
    PATH="$tmp/bin:$PATH" SLURM_JOB_NODELIST=localhost SLURM_JOB_ID=4242 SLURM_NTASKS="$np" SLURM_TASKS_PER_NODE="$np(x1)" \
      MASTER_PORT="$(free_port)" CONFIG="$cfg" OUT="$tmp/got" ULYSSES_WORKER="$worker" \
      bash examples/slurm/ulysses.sbatch > "$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    ;;
  *) echo "mode must be torchrun or slurm"; exit 2 ;;
esac

python3 - "$tmp/ref.jsonl" "$tmp/got/metrics.jsonl" "$mode" "$np" <<'PY'
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
got = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
assert len(ref) == 3 and len(got) == 3, (len(ref), len(got))
for a, b in zip(ref, got):
    assert a["step"] == b["step"], (a, b)
    assert abs(a["loss"] - b["loss"]) <= 1e-6 * abs(a["loss"]), ("step", a["step"], a["loss"], b["loss"])
print(f"{sys.argv[3]} x{sys.argv[4]}: losses", [round(g["loss"], 6) for g in got], "= ulysses-run")
PY
