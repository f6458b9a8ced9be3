#!/usr/bin/env bash
# CTest checks of tools/gpu-check.sh (docs/GPU.md) in --cpu mode on this build, and of its GPU
# build preflight on fake Python/torch/toolkit layouts. Usage:
#   check_gpu_check.sh BUILD_DIR failstep STEP   that step fails; the steps not needing it run
#   check_gpu_check.sh BUILD_DIR budget          --budget-s 1: no run starts, each says why
#   check_gpu_check.sh BUILD_DIR preflight CASE  CASE: ok | oldabi | nonvcc | nonccl
set -uo pipefail
BUILD="$1"; WHAT="$2"; ARG="${3:-}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
CHECK="$ROOT/tools/gpu-check.sh"

case "$WHAT" in
  failstep)
    STEPS="$(bash "$CHECK" --cpu --list-steps)" || { echo "--list-steps failed"; exit 1; }
    grep -qx "$ARG" <<<"$STEPS" || { echo "step $ARG is not listed: $STEPS"; exit 1; }
    ULYSSES_BUILD_DIR="$BUILD" OUT="$TMP/out" bash "$CHECK" --cpu --fail-step "$ARG" >"$TMP/log" 2>&1
    rc=$?
    [ "$rc" = 1 ] || { echo "exit $rc, want 1"; cat "$TMP/log"; exit 1; }
    python3 - "$TMP/out/report.json" "$ARG" "$STEPS" <<'PY' || { cat "$TMP/log"; exit 1; }
import json, sys
rep, failed, listed = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3].split()
st = {s["name"]: s for s in rep["steps"]}
assert [s["name"] for s in rep["steps"]] == listed, "report steps %s != listed %s" % (list(st), listed)
assert st[failed]["status"] == "failed" and "on purpose" in st[failed]["error"], st[failed]
# A step that needs the failed one (directly or through another) is skipped saying so; every
# other step ran (passed) or did not apply for its own stated reason.
dependent = {failed}
for s in rep["steps"]:
    n = s["name"]
    assert s["status"] in ("passed", "failed", "skipped", "timeout"), (n, s["status"])
    if n == failed:
        continue
    err = s["error"] or ""
    if s["status"] == "skipped" and err.startswith("not started: needs "):
        need = err.split("needs ", 1)[1].split(",")[0]
        assert need in dependent, (n, err)
        dependent.add(n)
    else:
        assert s["status"] == "passed" or (s["status"] == "skipped" and err), (n, s)
assert rep["ok"] is False and any(f.startswith(failed + ":") for f in rep["failures"]), rep["failures"]
ran = [s["name"] for s in rep["steps"] if s["status"] == "passed"]
print("failed %s; dependents skipped: %s; ran: %s" % (failed, sorted(dependent - {failed}), ran))
PY
    ;;
  budget)
    ULYSSES_BUILD_DIR="$BUILD" OUT="$TMP/out" bash "$CHECK" --cpu --budget-s 1 >"$TMP/log" 2>&1
    rc=$?
    python3 - "$TMP/out/report.json" "$rc" <<'PY' || { cat "$TMP/log"; exit 1; }
import json, sys
rep, rc = json.load(open(sys.argv[1])), int(sys.argv[2])
runs = [s for s in rep["steps"] if s["name"].startswith(("ours_", "groups_", "hf_"))]
assert runs, rep["steps"]
for s in runs:
    assert s["status"] == "skipped" and "budget" in (s["error"] or ""), s
assert not rep["runs"], "a run started: %s" % rep["runs"]
assert all(s["status"] != "pending" for s in rep["steps"]), rep["steps"]
assert rc == 0, "skipped for the budget is no failure: exit %d" % rc
print("runs skipped:", [(s["name"], s["error"]) for s in runs][:2], "...")
PY
    ;;
  preflight)
    F="$TMP/fake"
    mkdir -p "$F/py/torch/utils" "$F/py/nvidia/nccl/include" "$F/cuda/bin" "$F/cuda/include" "$F/sysinc" "$F/nobin"
    abi=True
    [ "$ARG" = oldabi ] && abi=False
    printf '__version__ = "2.11.0+cu130"\nfrom . import _C, version, utils\n' >"$F/py/torch/__init__.py"
    printf '_GLIBCXX_USE_CXX11_ABI = %s\n' "$abi" >"$F/py/torch/_C.py"
    printf 'cuda = "13.0"\n' >"$F/py/torch/version.py"
    printf 'cmake_prefix_path = "/fake/torch/share/cmake"\n' >"$F/py/torch/utils/__init__.py"
    [ "$ARG" = nonccl ] || : >"$F/py/nvidia/nccl/include/nccl.h"
    printf '#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n' >"$F/cuda/bin/nvcc"
    chmod +x "$F/cuda/bin/nvcc"
    PYDIR="$(dirname "$(command -v python3)")"
    P="$PYDIR:/usr/bin:/bin"
    [ "$ARG" = nonvcc ] || P="$F/cuda/bin:$P"
    env -u CUDA_HOME -u CUDACXX PATH="$P" PYTHONPATH="$F/py" GPU_CHECK_CUDA_DEFAULT="$F/none" \
        GPU_CHECK_SYSTEM_INCLUDE="$F/sysinc" OUT="$TMP/out" bash "$CHECK" --preflight >"$TMP/log" 2>&1
    rc=$?
    python3 - "$TMP/out/report.json" "$rc" "$ARG" "$F" <<'PY' || { cat "$TMP/log"; exit 1; }
import json, sys
rep, rc, case, F = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3], sys.argv[4]
pf, step = rep["preflight"], rep["steps"][0]
probs = pf["problems"]
want = {"oldabi": "old C++ ABI", "nonvcc": "nvcc not found", "nonccl": "nccl.h not found"}
if case == "ok":
    assert rc == 0 and step["status"] == "passed" and not probs, (rc, step, probs)
    a = pf["cmake_args"]
    for x in ("-DULYSSES_CUDA=on", "-DULYSSES_CUDA_ROOT=" + F + "/cuda", "-DUSE_SYSTEM_NVTX=ON"):
        assert x in a, (x, a)
    assert pf["nccl_include"] == F + "/py/nvidia/nccl/include", pf
else:
    assert rc == 1 and step["status"] == "failed", (rc, step)
    assert len(probs) == 1 and want[case] in probs[0], probs
    assert want[case] in step["error"], step
print(case, "->", probs or pf["cmake_args"])
PY
    ;;
  *) echo "unknown check $WHAT"; exit 2 ;;
esac
