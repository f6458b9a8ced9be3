#!/usr/bin/env bash
# CTest checks of tools/gpu-check.sh (docs/GPU.md) in --cpu mode on this build, and of its GPU
# build preflight on fake Python/torch/toolkit layouts. Usage:
#   check_gpu_check.sh BUILD_DIR failstep STEP   that step fails; the steps not needing it run
#   check_gpu_check.sh BUILD_DIR budget          --budget-s 1: no run starts, each says why,
#                                                the report is incomplete (exit 3)
#   check_gpu_check.sh BUILD_DIR headline        a budget that holds the headline runs but not
#                                                the tail: headline first, `complete: false`,
#                                                exit 3; then `--steps <rerun>` finishes the rest
#   check_gpu_check.sh BUILD_DIR preflight CASE  CASE: ok | oldabi | nonvcc | nonccl | cudamismatch
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
assert rc == 3, "skipped for the budget is no failure but incomplete: exit %d, want 3" % rc
assert rep["complete"] is False and rep["ok"] is False and not rep["failures"], rep
assert set(rep["incomplete_steps"]) == {s["name"] for s in rep["steps"] if s.get("unfinished")}, rep["incomplete_steps"]
assert all(s["name"] in rep["incomplete_steps"] for s in runs), rep["incomplete_steps"]
print("runs skipped:", [(s["name"], s["error"]) for s in runs][:2], "...")
PY
    ;;
  headline)
    bash "$CHECK" --cpu --steps ours_512_notrace,nosuchstep >"$TMP/log0" 2>&1
    rc=$?
    [ "$rc" = 2 ] && grep -q "nosuchstep" "$TMP/log0" || { echo "--steps with an unknown step: exit $rc, want 2"; cat "$TMP/log0"; exit 1; }
    # The tail (traced runs, self-test, group run, tests) is said to take more than the whole budget.
    TAIL="ours_128_trace=99.9,ours_512_trace=99.9,kernel_check_selftest=99.9,groups_1rank=99.9,tests=99.9"
    GPU_CHECK_EXPECTED_S="$TAIL" ULYSSES_BUILD_DIR="$BUILD" OUT="$TMP/out1" bash "$CHECK" --cpu --budget-s 100 >"$TMP/log1" 2>&1
    rc1=$?
    rerun="$(python3 - "$TMP/out1/report.json" "$rc1" "$(bash "$CHECK" --cpu --list-steps)" <<'PY'
import json, sys
rep, rc, listed = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3].split()
st = {s["name"]: s for s in rep["steps"]}
assert [s["name"] for s in rep["steps"]] == listed, listed
head = ["ours_512_notrace", "hf_512", "ours_128_notrace", "hf_128"]
tail = ["ours_128_trace", "ours_512_trace", "kernel_check_selftest", "groups_1rank", "tests"]
assert listed[2:6] == head and listed[6:] == tail, listed  # the order of value
for n in head:  # ran (Hugging Face: skipped for its own reason when transformers is missing)
    assert st[n]["status"] == "passed" or (n.startswith("hf_") and st[n]["status"] == "skipped"
                                           and not st[n].get("unfinished")), st[n]
assert st["ours_512_notrace"]["status"] == "passed", st["ours_512_notrace"]
for n in tail:
    assert st[n]["status"] == "skipped" and st[n].get("unfinished"), st[n]
assert [r["name"] for r in rep["runs"]] == ["ours_512_notrace", "ours_128_notrace"], rep["runs"]
assert rep["complete"] is False and rep["ok"] is False and not rep["failures"], rep
assert rc == 3, "incomplete: exit %d, want 3" % rc
assert rep["incomplete_steps"] == tail and rep["rerun"] == "tools/gpu-check.sh --cpu --steps " + ",".join(tail), rep["rerun"]
print(",".join(tail))
PY
)" || { cat "$TMP/log1"; exit 1; }
    # The second call finishes the rest (the prerequisites come along; the headline is not rerun).
    ULYSSES_BUILD_DIR="$BUILD" OUT="$TMP/out2" bash "$CHECK" --cpu --steps "$rerun" >"$TMP/log2" 2>&1
    rc2=$?
    python3 - "$TMP/out2/report.json" "$rc2" "$rerun" <<'PY' || { cat "$TMP/log2"; exit 1; }
import json, sys
rep, rc, rerun = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3].split(",")
st = {s["name"]: s for s in rep["steps"]}
assert rc == 0 and rep["complete"] is True and rep["ok"] is True, (rc, rep["failures"], rep["incomplete_steps"])
for n in rerun:
    assert st[n]["status"] == "passed", st[n]
for n in ("ours_512_notrace", "hf_512", "ours_128_notrace", "hf_128"):
    assert st[n]["status"] == "skipped" and st[n]["error"] == "not selected (--steps)", st[n]
assert rep["selected"] == ["preflight", "build"] + rerun, rep["selected"]
assert any(k.startswith("libtorch") and v.startswith("/") for k, v in rep["libraries"].items()), rep["libraries"]
print("first call: headline, then incomplete (exit 3); second call --steps %s: complete" % ",".join(rerun))
PY
    ;;
  preflight)
    F="$TMP/fake"
    mkdir -p "$F/py/torch/utils" "$F/py/nvidia/nccl/include" "$F/cuda/bin" "$F/cuda/include" "$F/sysinc" "$F/nobin"
    abi=True
    [ "$ARG" = oldabi ] && abi=False
    torch_cuda=13.0
    [ "$ARG" = cudamismatch ] && torch_cuda=12.8
    printf '__version__ = "2.11.0+cu130"\nfrom . import _C, version, utils\n' >"$F/py/torch/__init__.py"
    printf '_GLIBCXX_USE_CXX11_ABI = %s\n' "$abi" >"$F/py/torch/_C.py"
    printf 'cuda = "%s"\n' "$torch_cuda" >"$F/py/torch/version.py"
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
want = {"oldabi": "old C++ ABI", "nonvcc": "nvcc not found", "nonccl": "nccl.h not found",
        "cudamismatch": "nvcc is CUDA 13.0 but torch 2.11.0+cu130 was built with CUDA 12.8"}
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
