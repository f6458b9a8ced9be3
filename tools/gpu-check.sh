#!/usr/bin/env bash
# tools/gpu-check.sh: the one prepared check for a GPU machine (one H200, Ubuntu 24.04,
# Python torch 2.x+cuXXX whose libtorch serves the C++ build), and its CPU twin for CI.
#
#   tools/gpu-check.sh --prepare     (on the dev machine) copy the header-only deps, sqlite3.h
#                                    and GoogleTest that the GPU machine lacks into
#                                    third_party_gpu/ (ignored by git; carry it along)
#   tools/gpu-check.sh               (on the GPU machine, < 9 min) preflight, build the CLI
#                                    programs against Python's libtorch (unity off: 16 cores),
#                                    then the steps by value: bench-1b (bf16, sp 1) at 64K tokens
#                                    untraced, Hugging Face Transformers on the same config and
#                                    tokens at 64K (when importable), the same two at 16K, the
#                                    traced runs with their trace checks, a 1-rank NCCL group run,
#                                    the unit tests last
#   tools/gpu-check.sh --cpu         the same steps at tiny size on the CPU build in
#                                    $ULYSSES_BUILD_DIR (CTest runs this; a few seconds)
#   tools/gpu-check.sh --preflight   only the GPU build preflight (what the build would use)
# Options: --list-steps (the step names of the mode in run order, one a line), --steps A,B (run
# only these, with the steps they need: preflight and build, cheap again on a warm machine with
# build-gpu/ in place; a second call finishes what a first one skipped for budget, its report's
# `rerun`), --fail-step NAME (test hook: that step fails at its start), --budget-s S (time budget
# of the whole check; default 540 on a GPU, 240 with --cpu). Test hook: GPU_CHECK_EXPECTED_S=
# NAME=S,... replaces steps' expected seconds.
#
# Steps: each runs under its own timeout with its errors caught; a step whose expected time
# exceeds what is left of the budget, or whose prerequisite failed, is skipped. The report
# (OUT/report.json) is rewritten after every step and on every exit (also on SIGTERM/SIGINT,
# e.g. an outer time limit, and on an error of the driver itself): its `steps` list gives each
# step's name, status (passed, failed, skipped, timeout, or pending if never reached), seconds
# and error; `complete` is false when a selected step was skipped for the budget (or never
# reached), and `rerun` is then the --steps call that finishes them.
# Output folder: $OUT when set, else ./out/gpu-check-<mode>. Exit 0 when every selected step
# passed or was skipped for a stated reason that is no failure (no transformers), 1 when one
# failed or timed out, 3 when none failed but steps were skipped for the budget (incomplete),
# 2 for bad usage.
#
# Preflight (GPU mode, before anything compiles; each problem named in report.preflight):
# torch importable, its version and C++ ABI (a wheel built with the old ABI is refused: our
# libraries build with the new one), nvcc (CUDACXX, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin),
# nccl.h (pip's nvidia-nccl include folder, the toolkit, /usr/include), USE_SYSTEM_NVTX where
# the CUDA version needs it (>= 12.9 ships NVTX3 headers only), and -DULYSSES_CUDA=on with the
# toolkit root so CUPTI/NVTX never switch off silently; nvcc's CUDA against torch's (another
# major version is refused, another minor noted). After the build, report.libraries names the
# libcupti/libcudart/libnccl/libtorch files the worker resolves (ldd).
#
# Report figures: per run tokens/s, step ms (median of the steps after the first), peak memory
# (allocator peak allocated and reserved on GPU, VmHWM on CPU), the memory plan (`ulysses-run
# --plan --json`) beside them, model TFLOP/s, tracing overhead (median step ms with tracing
# on / off - 1), the trace checks (kernel attribution fraction from `ulysses-trace summary`)
# and the Hugging Face figures. Model FLOPs per step (no recompute counted, as MFU does):
#   6 * matmul_params * tokens + 6 * L * N^2 * d * b   (the second term is
#   12 * L * N^2 * d * b halved for the causal mask; matmul_params = params - V*d when the
#   embedding is untied, as engine/cost/cost_model.hpp counts)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TP="$ROOT/third_party_gpu"
MODE=gpu
LIST=0
FAIL_STEP=""
BUDGET=""
SELECT=""
usage() { echo "gpu-check: $*" >&2; echo "usage: tools/gpu-check.sh [--prepare | --cpu | --preflight] [--list-steps] [--steps A,B] [--fail-step NAME] [--budget-s S]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) MODE=prepare ;;
    --cpu) MODE=cpu ;;
    --preflight) MODE=preflight ;;
    --list-steps) LIST=1 ;;
    --fail-step) [ $# -ge 2 ] || usage "--fail-step needs a step name (see --list-steps)"; FAIL_STEP="$2"; shift ;;
    --steps) [ $# -ge 2 ] || usage "--steps needs step names, comma-separated (see --list-steps)"; SELECT="$2"; shift ;;
    --budget-s) [ $# -ge 2 ] || usage "--budget-s needs a number of seconds"; BUDGET="$2"; shift ;;
    -h|--help) sed -n '2,53p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) usage "unknown option '$1'" ;;
  esac
  shift
done
if [ -n "$BUDGET" ] && ! [[ "$BUDGET" =~ ^[0-9]+([.][0-9]+)?$ ]]; then usage "--budget-s '$BUDGET' is not a number of seconds"; fi
say() { printf '==> gpu-check: %s\n' "$*" >&2; }

if [ "$MODE" = prepare ]; then
  set -e
  rm -rf "$TP"
  mkdir -p "$TP/usr/include" "$TP/usr/share/cmake" "$TP/usr/lib/x86_64-linux-gnu/cmake"
  cp -r /usr/include/nlohmann /usr/include/CLI "$TP/usr/include/"
  cp /usr/include/sqlite3.h /usr/include/sqlite3ext.h "$TP/usr/include/"
  cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$TP/usr/share/cmake/"
  cp -r /usr/include/gtest /usr/include/gmock "$TP/usr/include/"
  cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a "$TP/usr/lib/x86_64-linux-gnu/"
  cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest "$TP/usr/lib/x86_64-linux-gnu/cmake/"
  say "prepared $TP ($(du -sh "$TP" | cut -f1)); carry it to the GPU machine next to the sources"
  exit 0
fi

command -v python3 >/dev/null || { say "python3 is needed to drive the check"; exit 2; }
OUT_DIR="${OUT:-$ROOT/out/gpu-check-$MODE}"
[ "$LIST" = 1 ] || mkdir -p "$OUT_DIR" || { say "cannot create the output folder $OUT_DIR"; exit 2; }
export GPU_CHECK_MODE="$MODE" GPU_CHECK_ROOT="$ROOT" GPU_CHECK_OUT="$OUT_DIR" GPU_CHECK_LIST="$LIST" \
       GPU_CHECK_FAIL_STEP="$FAIL_STEP" GPU_CHECK_BUDGET="$BUDGET" GPU_CHECK_SELECT="$SELECT" GPU_CHECK_TP="$TP" GPU_CHECK_T0="$(date +%s.%N)"
exec python3 - <<'PY'
# Driver: steps, report. Standard library only.
import json, os, re, signal, sqlite3, statistics, subprocess, sys, time, random, shutil, struct, math, traceback

mode = os.environ["GPU_CHECK_MODE"]
root, out = os.environ["GPU_CHECK_ROOT"], os.environ["GPU_CHECK_OUT"]
TP = os.environ["GPU_CHECK_TP"]
gpu = mode in ("gpu", "preflight")
T0 = float(os.environ["GPU_CHECK_T0"])
BUDGET_S = float(os.environ["GPU_CHECK_BUDGET"] or (540 if gpu else 240))
FAIL_STEP = os.environ["GPU_CHECK_FAIL_STEP"]

def log(msg):
    print("==> gpu-check: " + msg, file=sys.stderr, flush=True)

def remaining():
    return BUDGET_S - (time.time() - T0)

def on_driver_error(etype, value, tb):
    """An error of this driver itself (not of a step) still leaves a report saying so."""
    why = "".join(traceback.format_exception(etype, value, tb))[-2000:]
    rep = globals().get("report")
    try:
        if rep is None:
            rep = {"mode": mode, "steps": [], "complete": False, "ok": False}
            os.makedirs(out, exist_ok=True)
            json.dump(dict(rep, driver_error=why), open(os.path.join(out, "report.json"), "w"), indent=2)
        else:
            rep["driver_error"] = why
            for st in rep["steps"]:
                if st["status"] == "pending":
                    st.update({"status": "skipped", "error": "not started: the check's driver failed", "unfinished": True})
            write_report()
    except Exception as x:  # the report could not be written: say both
        log("could not write the report: %s" % x)
    log("driver error: " + why.strip().splitlines()[-1])
    os._exit(1)

sys.excepthook = on_driver_error

class StepTimeout(Exception):
    pass

children = []  # processes started (each leads its own process group), killed on a signal

def run_cmd(args, timeout, env=None, cwd=None, log_path=None):
    """Runs args in its own process group; on timeout the whole group is killed and
    StepTimeout raised. Returns (returncode, stdout, stderr)."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                         start_new_session=True)
    children.append(p)
    try:
        o, e = p.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        o, e = p.communicate()
        if log_path:
            open(log_path, "w").write(e or "")
        raise StepTimeout("%s did not finish within %.0f s" % (os.path.basename(args[0]), timeout))
    if log_path:
        open(log_path, "w").write(e or "")
    return p.returncode, o, e

# ---- config: bench-1b on the GPU, the same structure at tiny size on the CPU ---------
cfg = json.load(open(os.path.join(root, "resources/configs/bench-1b.json")))
if gpu:
    seqs = [16384, 65536]
    steps = 4
    cfg["train"].update({"dtype": "bfloat16", "device": "cuda", "activation_checkpointing": "layer"})
else:
    cfg["model"].update({"vocab_size": 256, "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
                         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096})
    seqs = [128, 512]
    steps = 3
    cfg["train"].update({"dtype": "bfloat16", "device": "cpu", "threads_per_rank": 1})
# Hugging Face's regime on our side too (the comparison is like for like): layer checkpointing,
# no activation offload, no tiled loss or MLP; fp32 masters with bf16 compute on both sides.
cfg["train"].update({"offload_activations": False, "loss_chunk_tokens": 0, "mlp_chunk_tokens": 0})
cfg["parallel"].update({"sp_size": 1, "dp_size": 1, "backend": "auto"})
HF_DIFFERS = ("same regime: fp32 weights, gradients and AdamW state with bf16 compute (ours: bf16 casts of the fp32 "
              "masters; HF: torch.autocast bf16), layer activation checkpointing, no activation offload, no tiled "
              "loss or MLP, full logits, SDPA, the same tokens (seeded 1234) and HF's torch.manual_seed(1234) vs our "
              "train.seed; what differs: the engine (C++ libtorch vs Python Transformers) and its kernels")
cfg["train"].update({"steps": steps, "warmup_steps": 1})
m = cfg["model"]

# ---- the steps: (name, expected s, timeout s, prerequisites), in order of value -----------
# What the first GPU hour must bring home comes first: ours against Hugging Face at the
# longest length (the headline), then at 16K, then the traced runs and their checks, the
# NCCL group run, and the unit tests last (their targets are built in their own step).
def exp(gpu_s, cpu_s):
    return gpu_s if gpu else cpu_s

big_s, small_s = max(seqs), min(seqs)
STEPS = [("preflight", exp(20, 0), exp(60, 20), []),
         ("build", exp(240, 0), exp(420, 20), ["preflight"])]
for s in (big_s, small_s):
    big = s >= 65536
    STEPS.append(("ours_%d_notrace" % s, exp(110 if big else 45, 2), exp(240 if big else 150, 60), ["build"]))
    STEPS.append(("hf_%d" % s, exp(150 if big else 70, 5), exp(300 if big else 180, 120), []))
for s in (small_s, big_s):
    STEPS.append(("ours_%d_trace" % s, exp(110 if s >= 65536 else 45, 2), exp(240 if s >= 65536 else 150, 60), ["build"]))
if not gpu:
    STEPS.append(("kernel_check_selftest", 1, 30, ["ours_%d_trace" % small_s]))
STEPS += [("groups_1rank", exp(45, 2), exp(150, 60), ["build"]),
          ("tests", exp(90, 2), exp(200, 60), ["build"])]
if mode == "preflight":
    STEPS = STEPS[:1]
NAMES = [s[0] for s in STEPS]
NEEDS = {s[0]: s[3] for s in STEPS}
for item in filter(None, os.environ.get("GPU_CHECK_EXPECTED_S", "").split(",")):  # test hook
    k, _, v = item.partition("=")
    STEPS = [(n, float(v) if n == k else e, t, nd) for n, e, t, nd in STEPS]

if os.environ["GPU_CHECK_LIST"] == "1":
    print("\n".join(NAMES))
    sys.exit(0)

# --steps: the named steps plus what they need (preflight and build are cheap on a warm machine
# whose build-gpu/ is still there: configure and an up-to-date build)
asked = [x for x in os.environ.get("GPU_CHECK_SELECT", "").replace(" ", "").split(",") if x]
unknown = [x for x in asked if x not in NAMES]
SELECTED = set(asked or NAMES)
todo = list(SELECTED)
while todo:
    for n in NEEDS.get(todo.pop(), []):
        if n not in SELECTED:
            SELECTED.add(n)
            todo.append(n)

report = {"mode": mode, "budget_s": BUDGET_S, "fail_step": FAIL_STEP or None,
          "selected": [n for n in NAMES if n in SELECTED] if asked else None, "complete": False, "rerun": None,
          "steps": [{"name": n, "status": "pending", "seconds": 0.0, "error": None} for n in NAMES],
          "model": {"config": "resources/configs/bench-1b.json" + ("" if gpu else " structure at tiny size"), **m},
          "runs": [], "plans": {}, "regime": {k: cfg["train"].get(k) for k in ("dtype", "activation_checkpointing",
          "offload_activations", "loss_chunk_tokens", "mlp_chunk_tokens", "seed")}, "tracing_overhead": [], "trace_checks": {}, "hf": [], "failures": []}
step_of = {s["name"]: s for s in report["steps"]}

def write_report():
    report["elapsed_s"] = round(time.time() - T0, 1)
    report["failures"] = ["%s: %s%s" % (s["name"], s["status"], (" (" + s["error"].splitlines()[0][:300] + ")") if s["error"] else "")
                          for s in report["steps"] if s["status"] in ("failed", "timeout")]
    # Incomplete: a selected step skipped for the budget (or behind one that was), or never reached.
    short = [s["name"] for s in report["steps"] if s["status"] == "pending" or s.get("unfinished")]
    report["complete"] = not short
    report["incomplete_steps"] = short
    report["rerun"] = ("tools/gpu-check.sh%s --steps %s" % (" --cpu" if mode == "cpu" else "", ",".join(short))) if short else None
    report["ok"] = not report["failures"] and report["complete"] and "driver_error" not in report
    tmp = os.path.join(out, ".report.json.tmp")
    with open(tmp, "w") as f:
        json.dump(report, f, indent=2)
    os.replace(tmp, os.path.join(out, "report.json"))

if (FAIL_STEP and FAIL_STEP not in NAMES) or unknown:
    report["usage_error"] = "%s: no such step in %s mode (steps: %s)" % (
        ("--fail-step " + FAIL_STEP) if FAIL_STEP and FAIL_STEP not in NAMES else ("--steps " + ",".join(unknown)),
        mode, ", ".join(NAMES))
    for s in report["steps"]:
        s["status"], s["error"] = "skipped", "not started: bad usage"
    write_report()
    log(report["usage_error"])
    sys.exit(2)

current = {"name": None, "t": 0.0}

def on_signal(signum, frame):
    name = current["name"]
    why = "stopped by signal %d (an outer time limit?)" % signum
    if name:
        step_of[name].update({"status": "timeout", "seconds": round(time.time() - current["t"], 1), "error": why})
    for s in report["steps"]:
        if s["status"] == "pending" and s["name"] != name:
            s.update({"status": "skipped", "error": "not started: " + why, "unfinished": True})
    report["stopped_by_signal"] = signum
    for p in children:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
    write_report()
    log("stopped by signal %d; report written" % signum)
    os._exit(1)

signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
write_report()

class Skip(Exception):
    """A step that does not apply; ok=True: steps needing it may still run."""
    def __init__(self, why, ok=False):
        super().__init__(why)
        self.ok = ok

def satisfied(name):
    s = step_of[name]
    return s["status"] == "passed" or (s["status"] == "skipped" and s.get("satisfies_needs"))

BUILD = os.environ.get("ULYSSES_BUILD_DIR") or os.path.join(root, "build-gpu" if gpu else "build")
run_bin = os.path.join(BUILD, "app/run/ulysses-run")
worker_bin = os.path.join(BUILD, "app/worker/ulysses-worker")
trace_bin = os.path.join(BUILD, "app/trace/ulysses-trace")
LOG = os.path.join(out, "gpu-check.log")
preflight = {"problems": [], "cmake_args": [], "env": {}}

# ---- preflight (GPU build): each problem named ---------------------------------------
TORCH_PROBE = ("import json, torch; print(json.dumps({'version': torch.__version__, "
               "'cxx11_abi': bool(getattr(torch._C, '_GLIBCXX_USE_CXX11_ABI', True)), "
               "'cuda': getattr(torch.version, 'cuda', None), 'cmake_prefix': torch.utils.cmake_prefix_path}))")
NCCL_PROBE = ("import os, nvidia.nccl as n; print([os.path.join(p, 'include') for p in n.__path__][0])")

def version_tuple(s):
    return tuple(int(x) for x in re.findall(r"\d+", s or "")[:2]) or (0,)

def step_preflight(deadline):
    report["preflight"] = preflight
    probs = preflight["problems"]
    if mode == "cpu":
        for b in (run_bin, worker_bin, trace_bin):
            if not os.access(b, os.X_OK):
                probs.append("%s is missing: build the CLI programs in ULYSSES_BUILD_DIR first" % b)
        if probs:
            raise RuntimeError("; ".join(probs))
        report["libraries"] = worker_libraries()
        raise Skip("--cpu: the CPU build in %s, no GPU toolchain needed" % BUILD, ok=True)
    cuda_default = os.environ.get("GPU_CHECK_CUDA_DEFAULT", "/usr/local/cuda")
    sys_include = os.environ.get("GPU_CHECK_SYSTEM_INCLUDE", "/usr/include")
    # torch: version and C++ ABI
    rc, o, e = run_cmd([sys.executable, "-c", TORCH_PROBE], deadline - time.time())
    torch_info = None
    if rc != 0:
        probs.append("python3 cannot import torch (%s): install the CUDA wheel whose libtorch serves the build"
                     % ((e or "").strip().splitlines() or ["no message"])[-1])
    else:
        torch_info = json.loads(o.strip().splitlines()[-1])
        preflight["torch"] = torch_info
        if not torch_info["cxx11_abi"]:
            probs.append("torch %s uses the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0): our libraries (SQLite, "
                         "nlohmann, GoogleTest) build with the new one and would not link with its libtorch; install "
                         "a torch wheel built with the new ABI (every wheel from 2.7 on)" % torch_info["version"])
    # nvcc
    nvcc, cudacxx = None, os.environ.get("CUDACXX")
    if cudacxx:
        if os.access(cudacxx, os.X_OK):
            nvcc = cudacxx
        else:
            probs.append("CUDACXX=%s is not an executable nvcc" % cudacxx)
    else:
        cands = [shutil.which("nvcc")]
        if os.environ.get("CUDA_HOME"):
            cands.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
        cands.append(os.path.join(cuda_default, "bin", "nvcc"))
        nvcc = next((c for c in cands if c and os.access(c, os.X_OK)), None)
        if not nvcc:
            probs.append("nvcc not found (CUDACXX, PATH, $CUDA_HOME/bin, %s/bin): install the CUDA toolkit or set "
                         "CUDACXX; without it CMake cannot enable CUDA for find_package(Torch)" % cuda_default)
    cuda_root, cuda_version = None, None
    if nvcc:
        preflight["nvcc"] = nvcc
        cuda_root = os.path.dirname(os.path.dirname(os.path.abspath(nvcc)))
        try:
            rc, o, e = run_cmd([nvcc, "--version"], 30)
            mm = re.search(r"release (\d+\.\d+)", o or "")
            cuda_version = mm.group(1) if mm else None
        except (OSError, StepTimeout) as x:
            probs.append("%s --version failed: %s" % (nvcc, x))
        preflight["cuda_version"] = cuda_version
        preflight["cuda_root"] = cuda_root
    # nvcc's CUDA against the one torch was built with: another major version builds code that
    # the wheel's libcudart cannot load; another minor works (CUDA's minor-version compatibility)
    torch_cuda = (torch_info or {}).get("cuda")
    if cuda_version and torch_cuda:
        preflight["cuda_versions"] = {"nvcc": cuda_version, "torch": torch_cuda}
        if version_tuple(cuda_version)[0] != version_tuple(torch_cuda)[0]:
            probs.append("nvcc is CUDA %s but torch %s was built with CUDA %s: install the toolkit of torch's major "
                         "version or the torch wheel of the toolkit's (e.g. +cu%s)" %
                         (cuda_version, torch_info["version"], torch_cuda, cuda_version.replace(".", "")))
        elif version_tuple(cuda_version) != version_tuple(torch_cuda):
            preflight["cuda_versions"]["note"] = "minor versions differ (compatible)"
    # nccl.h: pip's nvidia-nccl, the toolkit, the system
    nccl_dirs = []
    rc, o, e = run_cmd([sys.executable, "-c", NCCL_PROBE], 30)
    if rc == 0 and o.strip():
        nccl_dirs.append(o.strip().splitlines()[-1])
    if cuda_root:
        nccl_dirs.append(os.path.join(cuda_root, "include"))
    nccl_dirs.append(sys_include)
    nccl_inc = next((d for d in nccl_dirs if os.path.isfile(os.path.join(d, "nccl.h"))), None)
    preflight["nccl_include_searched"] = nccl_dirs
    if not nccl_inc:
        probs.append("nccl.h not found (searched %s): pip install nvidia-nccl-cu%s, or install the system's "
                     "libnccl-dev; ProcessGroupNCCL's header includes it" %
                     (", ".join(nccl_dirs), (cuda_version or "13").split(".")[0]))
    else:
        preflight["nccl_include"] = nccl_inc
    if gpu and mode == "gpu" and not os.environ.get("ULYSSES_BUILD_DIR") and not os.path.isdir(os.path.join(TP, "usr/include/nlohmann")):
        probs.append("third_party_gpu/ is missing: run tools/gpu-check.sh --prepare on the dev machine and carry it")
    args = []
    if torch_info:
        args.append("-DCMAKE_PREFIX_PATH=%s;%s/usr" % (torch_info["cmake_prefix"], TP))
    if cuda_root:
        args += ["-DULYSSES_CUDA=on", "-DULYSSES_CUDA_ROOT=" + cuda_root, "-DCMAKE_CUDA_COMPILER=" + nvcc]
    v = version_tuple(cuda_version or (torch_info or {}).get("cuda"))
    if v >= (12, 9):  # NVTX3 headers only: torch's cmake must not look for the old nvToolsExt target
        args.append("-DUSE_SYSTEM_NVTX=ON")
        preflight["nvtx"] = "CUDA %s ships NVTX3 headers only: USE_SYSTEM_NVTX=ON" % ".".join(map(str, v))
    preflight["cmake_args"] = args
    if nccl_inc:  # engine/core/CMakeLists.txt's variable; CXXFLAGS for any other target that includes it
        args.append("-DULYSSES_NCCL_INCLUDE=" + nccl_inc)
        preflight["env"]["CXXFLAGS"] = "-isystem " + nccl_inc
    if probs:
        raise RuntimeError("; ".join(probs))

def step_build(deadline):
    if mode == "cpu":
        raise Skip("--cpu uses the CPU build in ULYSSES_BUILD_DIR", ok=True)
    if os.environ.get("ULYSSES_BUILD_DIR"):
        raise Skip("ULYSSES_BUILD_DIR given: built already", ok=True)
    sqlite_lib = "/usr/lib/x86_64-linux-gnu/libsqlite3.so" if os.path.exists("/usr/lib/x86_64-linux-gnu/libsqlite3.so") \
        else "/lib/x86_64-linux-gnu/libsqlite3.so.0"
    env = dict(os.environ, **preflight["env"])
    conf = ["cmake", "-S", root, "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release", "-DULYSSES_BUILD_UI=OFF",
            "-DULYSSES_BUILD_BENCH=OFF", "-DULYSSES_TEST_DIRS=config;cost;profiler",
            # file by file: 16 cores compile the engine's sources in parallel, where unity batches
            # of 8 would leave most of them idle
            "-DULYSSES_UNITY=OFF",
            "-DSQLite3_INCLUDE_DIR=%s/usr/include" % TP, "-DSQLite3_LIBRARY=" + sqlite_lib] + preflight["cmake_args"]
    t = time.time()
    rc, o, e = run_cmd(conf, deadline - time.time(), env=env)
    open(LOG, "a").write(o + e)
    if rc != 0:
        raise RuntimeError("configure failed: " + (e or o)[-1500:])
    feat = re.findall(r"\[(on |off)\] (CUPTI activity|NVTX ranges)", o)
    report["build_features"] = {n: s.strip() for s, n in feat}
    # the programs only: the unit tests' targets are built by the tests step, at the end
    rc, o, e = run_cmd(["cmake", "--build", BUILD, "-j%d" % (os.cpu_count() or 4), "--target", "ulysses-worker",
                        "ulysses-run", "ulysses-trace"], deadline - time.time(), env=env)
    open(LOG, "a").write(o + e)
    if rc != 0:
        raise RuntimeError("build failed: " + (o + e)[-1500:])
    report["build_seconds"] = round(time.time() - t, 1)
    report["libraries"] = worker_libraries()

LIB_WORDS = ("libcupti", "libcudart", "libnccl", "libtorch", "libc10_cuda", "libnvToolsExt")

def worker_libraries():
    """Which libcupti/libcudart/libnccl/libtorch files the worker resolves (ldd): a pip wheel's
    or the toolkit's, named in the report beside the versions the preflight found."""
    try:
        rc, o, e = run_cmd(["ldd", worker_bin], 30)
    except (OSError, StepTimeout) as x:
        return {"error": str(x)}
    libs = {}
    for line in (o or "").splitlines():
        mm = re.match(r"\s*(\S+) => (\S+|not found)", line)
        if mm and mm.group(1).startswith(LIB_WORDS):
            libs[mm.group(1)] = mm.group(2)
    return libs

def step_tests(deadline):
    if gpu:
        if not os.environ.get("ULYSSES_BUILD_DIR"):
            rc, o, e = run_cmd(["cmake", "--build", BUILD, "-j%d" % (os.cpu_count() or 4), "--target", "test_run_config",
                                "test_device_decision", "test_cost_model", "test_profiler"], deadline - time.time(),
                               env=dict(os.environ, **preflight["env"]))
            open(LOG, "a").write(o + e)
            if rc != 0:
                raise RuntimeError("building the tests failed: " + (o + e)[-1500:])
        rc, o, e = run_cmd(["ctest", "--output-on-failure", "-j8", "--timeout", "120", "-R",
                            "DeviceDecision|Config|CostModel|GpuRecords|GpuCorrelation"], deadline - time.time(), cwd=BUILD)
    else:
        rc, o, e = run_cmd([os.path.join(BUILD, "tests/config/test_device_decision")], deadline - time.time())
    open(os.path.join(out, "ctest.log"), "w").write(o + e)
    if rc != 0:
        raise RuntimeError("tests failed (exit %d; see ctest.log)" % rc)

# ---- the same tokens for us and for Hugging Face: one uint16 file --------------------
tok_path = os.path.join(out, "tokens.u16")
n_tok = max(seqs) + 1
rng = random.Random(1234)
with open(tok_path, "wb") as f:
    f.write(struct.pack("<%dH" % n_tok, *[rng.randrange(m["vocab_size"]) for _ in range(n_tok)]))
cfg["data"] = {"kind": "tokens", "path": tok_path, "token_dtype": "uint16"}
cfg_path = os.path.join(out, "config.json")
json.dump(cfg, open(cfg_path, "w"), indent=2)

def params_of(mm):
    d, f, L, V, H, Hkv = mm["hidden_size"], mm["intermediate_size"], mm["num_hidden_layers"], mm["vocab_size"], \
        mm["num_attention_heads"], mm["num_key_value_heads"]
    dkv = Hkv * (d // H)
    per_layer = d * d * 2 + d * dkv * 2 + 3 * d * f + 2 * d
    total = V * d + L * per_layer + d + (0 if mm.get("tie_word_embeddings") else V * d)
    matmul = total if mm.get("tie_word_embeddings") else total - V * d
    return total, matmul

PARAMS, MATMUL_PARAMS = params_of(m)
report["model"].update({"params": PARAMS, "matmul_params": MATMUL_PARAMS})

def model_flops(n, b=1):
    return 6.0 * MATMUL_PARAMS * n * b + 6.0 * m["num_hidden_layers"] * n * n * m["hidden_size"] * b

report["flops_formula"] = "6*matmul_params*tokens + 6*L*N^2*d*b (causal attention, 12*L*N^2*d*b halved); no recompute counted"

def plan_for(seq, deadline):
    """The memory plan of this run (ulysses-run --plan --json), once per sequence length."""
    if seq in report["plans"]:
        return report["plans"][seq]
    rc, o, e = run_cmd([run_bin, cfg_path, "--plan", "--json", "--worker", worker_bin, "--set",
                        "train.seq_length=%d" % seq], min(120, deadline - time.time()))
    try:
        p = json.loads(o.strip().splitlines()[-1]) if rc == 0 and o.strip() else None
    except ValueError:
        p = None
    report["plans"][seq] = p if p is not None else {"error": "ulysses-run --plan exit %d: %s" % (rc, (e or "")[-500:])}
    return report["plans"][seq]

def run_ours(name, seq, trace, deadline, extra_env=None, extra_set=()):
    rdir = os.path.join(out, "runs", name)
    shutil.rmtree(rdir, ignore_errors=True)
    os.makedirs(os.path.dirname(rdir), exist_ok=True)
    res = {"name": name, "seq_length": seq, "tracing": trace, "run_dir": rdir}
    report["runs"].append(res)
    plan = plan_for(seq, deadline)
    args = [run_bin, cfg_path, "--json", "--worker", worker_bin, "--out", rdir,
            "--set", "train.seq_length=%d" % seq, "--set", "profile.enabled=%s" % ("true" if trace else "false")]
    for s in extra_set:
        args += ["--set", s]
    env = dict(os.environ, **(extra_env or {}))
    t = time.time()
    rc, o, e = run_cmd(args, deadline - time.time(), env=env, log_path=os.path.join(out, name + ".log"))
    res.update({"exit_code": rc, "wall_s": round(time.time() - t, 2)})
    metrics = [json.loads(l) for l in o.splitlines() if l.startswith("{")]
    dm = re.search(r"device (\S+) \(", e)
    res["device"] = dm.group(1) if dm else None
    if rc != 0 or not metrics:
        res["error"] = e[-2000:]
        raise RuntimeError("exit %d: %s" % (rc, (e.strip().splitlines() or [""])[-1][:300]))
    want_dev = "cuda:0" if gpu else "cpu"
    if res["device"] != want_dev:
        raise RuntimeError("worker decided device %s, expected %s" % (res["device"], want_dev))
    tail = metrics[1:] or metrics  # first step warms up (allocator, kernels, autotuning)
    step_ms = statistics.median(x["step_ms"] for x in tail)
    tokens = metrics[-1]["tokens"]
    peak = max(x["max_mem_bytes"] for x in metrics)
    res.update({"steps": len(metrics), "tokens_per_step": tokens, "step_ms": round(step_ms, 2),
                "tokens_per_s": round(tokens / (step_ms / 1000.0), 1), "peak_memory_bytes": peak,
                "model_tflops_per_s": float("%.4g" % (model_flops(seq) / (step_ms / 1000.0) / 1e12)),
                "loss_first_last": [metrics[0]["loss"], metrics[-1]["loss"]]})
    if trace:  # the allocator's reserved bytes, sampled at phase boundaries into the trace
        try:
            db = sqlite3.connect("file:%s?mode=ro" % os.path.join(rdir, "trace", "rank0.sqlite"), uri=True)
            res["peak_reserved_bytes"] = db.execute("SELECT max(reserved) FROM ULYSSES_MEMORY").fetchone()[0]
            db.close()
        except sqlite3.Error as x:
            res["peak_reserved_error"] = str(x)
    g = plan.get("gpu", {}) if isinstance(plan, dict) else {}
    planned = g.get("allocator_peak_bytes", plan.get("peak_bytes") if isinstance(plan, dict) else None)
    res["memory_vs_plan"] = {"planned_allocator_peak_bytes": planned, "allocated_peak_bytes": peak,
                             "planned_reserved_bytes": (g["allocator_peak_bytes"] + g["rounding_bytes"]) if g else None,
                             "reserved_peak_bytes": res.get("peak_reserved_bytes"),
                             "planned_device_bytes": g.get("device_bytes"),
                             "planned_pinned_host_bytes": g.get("offloaded_host_bytes"),
                             "allocated_over_planned": round(peak / planned, 3) if planned else None}
    if not all(math.isfinite(x["loss"]) for x in metrics):
        raise RuntimeError("non-finite loss")
    if trace:
        c = check_trace(rdir, want_kernels=gpu, deadline=deadline)
        report["trace_checks"][name] = c
        if not c.get("ok"):
            raise RuntimeError("trace checks failed: " + ", ".join(k for k, v in c.get("checks", {}).items() if not v)
                               + (" " + c["error"] if c.get("error") else ""))
    return res

def step_groups(deadline):
    # One rank with its process groups made anyway (ULYSSES_SINGLE_RANK_GROUPS=1): on one GPU,
    # the only way to run the NCCL path (peak-memory all-reduce on the GPU, shutdown at exit).
    r = run_ours("groups_1rank", seqs[0], False, deadline, extra_env={"ULYSSES_SINGLE_RANK_GROUPS": "1"},
                 extra_set=["train.steps=2"])
    wlog = open(os.path.join(out, "groups_1rank.log")).read()
    want = "backend %s (c10d groups made)" % ("nccl" if gpu else "gloo")
    r["groups_check"] = {"want_in_worker_log": want, "ok": want in wlog}
    if not r["groups_check"]["ok"]:
        raise RuntimeError("expected '%s' in the worker log" % want)

def make_run_step(seq, trace):
    return lambda deadline: run_ours("ours_%d_%s" % (seq, "trace" if trace else "notrace"), seq, trace, deadline)

def step_selftest(deadline):
    traced = [x for x in report["runs"] if x["name"] == "ours_%d_trace" % seqs[0] and x.get("exit_code") == 0]
    st = selftest_kernel_checks(traced[0]["run_dir"])
    report["trace_checks"]["kernel_check_selftest"] = st
    if not st["ok"]:
        raise RuntimeError("kernel-check self-test failed: %s" % json.dumps(st["found"]))

def make_hf_step(seq):
    def f(deadline):
        try:
            import importlib.util
            have = importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("torch") is not None
        except Exception:
            have = False
        if not have:
            raise Skip("transformers (or torch) is not importable by %s" % sys.executable)
        r = run_hf(seq, deadline)
        report["hf"].append(r)
    return f
# ---- trace checks -------------------------------------------------------------------
ATTN_KERNEL_WORDS = ("flash", "fmha", "cudnn", "sdpa", "attention")  # flash / mem-efficient / cuDNN SDPA kernels

def check_trace(rdir, want_kernels, deadline=None):
    """Every kernel attributed to the innermost host range around its launch (kernel ->
    CUPTI runtime record by correlationId -> NVTX range on the launching thread), attention
    kernels under attention ranges, and the summary tool's view of the same file."""
    r = {}
    path = os.path.join(rdir, "trace", "rank0.sqlite")
    if not os.path.exists(path):
        return {"ok": False, "error": "no trace file " + path}
    try:  # bounded by the step's deadline (the self-test has none of its own: 120 s)
        s = subprocess.run([trace_bin, "summary", rdir, "--json"], capture_output=True, text=True,
                           timeout=max(1.0, min(120.0, (deadline or time.time() + 120) - time.time())))
    except subprocess.TimeoutExpired:
        raise StepTimeout("ulysses-trace summary did not finish before the step's deadline")
    if s.returncode != 0:
        return {"ok": False, "error": "ulysses-trace summary failed: " + s.stderr[-500:]}
    summ = json.loads(s.stdout)
    r["summary"] = {"num_ranges": summ["num_ranges"], "num_kernels": summ["num_kernels"], "headline": summ["headline"],
                    "overall": summ["overall"], "kernel_attribution": summ.get("kernel_attribution")}
    r.update(kernel_attribution(path))
    # The loader's attribution: by the launching range's external id, else by launch time to the
    # stepping thread's innermost range (backward kernels of autograd's thread), else none.
    ka = summ.get("kernel_attribution") or {}
    r["attribution_fraction"] = ka.get("fraction")
    checks = {"ranges_present": summ["num_ranges"] > 0, "attention_ranges_present": r["attention_ranges"] > 0,
              "every_range_has_ulysses_row": r["ranges_without_row"] == 0}
    if want_kernels:
        checks.update({"kernels_present": r["kernels"] > 0 and summ["num_kernels"] > 0,
                       "every_kernel_attributed": r["kernels"] > 0 and ka.get("none", 1) == 0,
                       "attention_kernels_under_attention_ranges": r["attention_kernels_under_attention"] > 0,
                       "no_math_softmax_under_attention": r["softmax_kernels_under_attention"] == 0,
                       "summary_counts_the_same_kernels": summ["num_kernels"] == r["kernels"]})
    r["checks"] = checks
    r["ok"] = all(checks.values())
    return r

def kernel_attribution(path):
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    q = lambda sql, *a: db.execute(sql, a).fetchall()
    phases = dict(q("SELECT id, name FROM ULYSSES_PHASES"))
    attn_phase = [k for k, v in phases.items() if v == "attention"]
    ranges = q("SELECT e.rowid, e.start, e.end, e.globalTid, e.eventType, u.phase FROM NVTX_EVENTS e "
               "LEFT JOIN ULYSSES_RANGES u ON u.eventId = e.rowid WHERE e.eventType IN (59, 60)")
    res = {"ranges": len(ranges), "ranges_without_row": sum(1 for x in ranges if x[5] is None),
           "attention_ranges": sum(1 for x in ranges if x[5] in attn_phase)}
    kernels = q("SELECT k.rowid, s.value, rt.start, rt.globalTid FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.demangledName "
                # one API record per launch: a runtime call and the driver call under it share the
                # correlation id; the outer (earliest) one stands for the launch
                "LEFT JOIN (SELECT correlationId, MIN(start) AS start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                "GROUP BY correlationId) rt ON rt.correlationId = k.correlationId")
    by_tid = {}
    for rid, a, b, tid, et, ph in ranges:
        if et == 59 and b is not None:
            by_tid.setdefault(tid, []).append((a, b, ph))
    unattributed, names_unattr, attn_under, softmax_under, by_phase = 0, {}, 0, 0, {}
    for kid, name, launch, tid in kernels:
        best = None
        if launch is not None:
            for a, b, ph in by_tid.get(tid, []):
                if a <= launch <= b and (best is None or b - a < best[1] - best[0]):
                    best = (a, b, ph)
        if best is None:
            unattributed += 1
            names_unattr[name[:80]] = names_unattr.get(name[:80], 0) + 1
            continue
        pname = phases.get(best[2], "?")
        by_phase[pname] = by_phase.get(pname, 0) + 1
        if best[2] in attn_phase:
            low = name.lower()
            if any(w in low for w in ATTN_KERNEL_WORDS):
                attn_under += 1
            if "softmax" in low:
                softmax_under += 1
    res.update({"kernels": len(kernels), "unattributed": unattributed,
                "unattributed_names": sorted(names_unattr.items(), key=lambda x: -x[1])[:10],
                "kernels_by_phase": by_phase, "attention_kernels_under_attention": attn_under,
                "softmax_kernels_under_attention": softmax_under})
    db.close()
    return res

def selftest_kernel_checks(rdir):
    """CPU traces hold no kernels; prove the kernel checks on a copy of a real CPU trace with
    three synthetic kernels: a flash kernel launched inside an attention range, a GEMM
    inside another range (its launch recorded twice, runtime and driver call, as CUPTI does
    with both API kinds on), and one launched outside every range. The checker must attribute
    two, find the flash kernel under attention, and report exactly one unattributed."""
    src = os.path.join(rdir, "trace", "rank0.sqlite")
    dst_dir = os.path.join(out, "selftest", "trace")
    os.makedirs(dst_dir, exist_ok=True)
    dst = os.path.join(dst_dir, "rank0.sqlite")
    s = sqlite3.connect(src)
    d = sqlite3.connect(dst)
    s.backup(d)
    s.close()
    q = lambda sql, *a: d.execute(sql, a).fetchall()
    attn = q("SELECT e.start, e.end, e.globalTid FROM NVTX_EVENTS e JOIN ULYSSES_RANGES u ON u.eventId = e.rowid "
             "JOIN ULYSSES_PHASES p ON p.id = u.phase WHERE p.name = 'attention' AND e.eventType = 59 LIMIT 1")[0]
    other = q("SELECT e.start, e.end, e.globalTid FROM NVTX_EVENTS e JOIN ULYSSES_RANGES u ON u.eventId = e.rowid "
              "JOIN ULYSSES_PHASES p ON p.id = u.phase WHERE p.name = 'qkv_proj' AND e.eventType = 59 LIMIT 1")[0]
    lo = q("SELECT MIN(start) FROM NVTX_EVENTS")[0][0]
    base = q("SELECT COALESCE(MAX(id), 0) FROM StringIds")[0][0]
    kernels = [("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", attn[0] + (attn[1] - attn[0]) // 2, attn[2]),
               ("sm90_xmma_gemm_bf16bf16_bf16f32", other[0] + (other[1] - other[0]) // 2, other[2]),
               ("void at::native::vectorized_elementwise_kernel", lo - 1000, attn[2])]
    for i, (name, launch, tid) in enumerate(kernels):
        sid = base + 1 + i
        d.execute("INSERT INTO StringIds(id, value) VALUES (?, ?)", (sid, name))
        d.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME(start, end, eventClass, globalTid, correlationId, nameId, returnValue) "
                  "VALUES (?, ?, 0, ?, ?, ?, 0)", (launch, launch + 10, tid, 900000 + i, sid))
        if i == 1:  # the driver call under the runtime call: same correlation id, still one kernel
            d.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME(start, end, eventClass, globalTid, correlationId, nameId, "
                      "returnValue) VALUES (?, ?, 0, ?, ?, ?, 0)", (launch + 2, launch + 8, tid, 900000 + i, sid))
        d.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL(start, end, deviceId, contextId, streamId, correlationId, demangledName, "
                  "shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, "
                  "dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId) "
                  "VALUES (?, ?, 0, 1, 7, ?, ?, ?, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, ?)",
                  (launch + 100, launch + 200, 900000 + i, sid, sid, i))
    d.commit()
    d.close()
    r = kernel_attribution(dst)
    ok = r["kernels"] == 3 and r["unattributed"] == 1 and r["attention_kernels_under_attention"] == 1 and \
        r["kernels_by_phase"].get("attention") == 1 and r["kernels_by_phase"].get("qkv_proj") == 1
    # the whole GPU check on this file: the summary tool sees the 3 kernels, and the check
    # must fail on "every_kernel_attributed" only
    full = check_trace(os.path.dirname(dst_dir), want_kernels=True)
    failed = sorted(k for k, v in full.get("checks", {}).items() if not v)
    ok = ok and full.get("summary", {}).get("num_kernels") == 3 and failed == ["every_kernel_attributed"]
    return {"ok": ok, "gpu_checks_failing_on_it": failed,
            "found": {k: r[k] for k in ("kernels", "unattributed", "attention_kernels_under_attention", "kernels_by_phase")},
            "expected": {"kernels": 3, "unattributed": 1, "attention_kernels_under_attention": 1,
                         "kernels_by_phase": {"attention": 1, "qkv_proj": 1}}}

# ---- Hugging Face Transformers on the same config and tokens -------------------------
HF_SCRIPT = r'''
import json, sys, time, statistics, struct
import torch, transformers
cfg = json.load(open(sys.argv[1])); seq = int(sys.argv[2]); steps = int(sys.argv[3]); dev = sys.argv[4]
m = cfg["model"]
hc = transformers.LlamaConfig(vocab_size=m["vocab_size"], hidden_size=m["hidden_size"], intermediate_size=m["intermediate_size"],
    num_hidden_layers=m["num_hidden_layers"], num_attention_heads=m["num_attention_heads"],
    num_key_value_heads=m["num_key_value_heads"], rms_norm_eps=m["rms_norm_eps"], rope_theta=m["rope_theta"],
    max_position_embeddings=max(m["max_position_embeddings"], seq), tie_word_embeddings=m["tie_word_embeddings"])
torch.manual_seed(1234)
# Our regime: fp32 weights, gradients and AdamW state, bf16 compute (autocast here).
bf16 = cfg["train"]["dtype"] == "bfloat16"
model = transformers.LlamaForCausalLM._from_config(hc, attn_implementation="sdpa", torch_dtype=torch.float32).to(dev)
model.gradient_checkpointing_enable()
model.config.use_cache = False
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=cfg["train"]["lr"], betas=(0.9, 0.95), weight_decay=cfg["train"]["weight_decay"])
raw = open(cfg["data"]["path"], "rb").read()
ids = torch.tensor(struct.unpack("<%dH" % (len(raw) // 2), raw)[: seq + 1], dtype=torch.long)
x = ids[:seq].unsqueeze(0).to(dev); y = ids[1 : seq + 1].unsqueeze(0).to(dev)
if dev.startswith("cuda"): torch.cuda.reset_peak_memory_stats()
times, losses = [], []
for s in range(steps):
    if dev.startswith("cuda"): torch.cuda.synchronize()
    t = time.time()
    with torch.autocast(device_type=dev.split(":")[0], dtype=torch.bfloat16, enabled=bf16):
        logits = model(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["train"]["grad_clip"])
    opt.step(); opt.zero_grad(set_to_none=True)
    if dev.startswith("cuda"): torch.cuda.synchronize()
    times.append((time.time() - t) * 1000); losses.append(loss.item())
ms = statistics.median(times[1:] or times)
peak = torch.cuda.max_memory_allocated() if dev.startswith("cuda") else None
print(json.dumps({"seq_length": seq, "steps": steps, "step_ms": round(ms, 2), "tokens_per_s": round(seq / (ms / 1000), 1),
                  "peak_memory_bytes": peak, "loss_first_last": [losses[0], losses[-1]],
                  "torch": torch.__version__, "transformers": transformers.__version__,
                  "attention": "sdpa", "gradient_checkpointing": True, "weights": "float32",
                  "compute": "bfloat16 autocast" if bf16 else "float32", "seed": 1234}))
'''

def run_hf(seq, deadline):
    rc, o, e = run_cmd([sys.executable, "-c", HF_SCRIPT, cfg_path, str(seq), str(steps), "cuda:0" if gpu else "cpu"],
                       deadline - time.time(), log_path=os.path.join(out, "hf_%d.log" % seq))
    if rc != 0:
        raise RuntimeError("exit %d: %s" % (rc, (e.strip().splitlines() or [""])[-1][:300]))
    r = json.loads(o.strip().splitlines()[-1])
    r["model_tflops_per_s"] = float("%.4g" % (model_flops(seq) / (r["step_ms"] / 1000.0) / 1e12))
    return r


# ---- the step loop ----------------------------------------------------------------------
FUNCS = {"preflight": step_preflight, "build": step_build, "tests": step_tests, "groups_1rank": step_groups,
         "kernel_check_selftest": step_selftest}
for s in seqs:
    FUNCS["ours_%d_notrace" % s] = make_run_step(s, False)
    FUNCS["ours_%d_trace" % s] = make_run_step(s, True)
    FUNCS["hf_%d" % s] = make_hf_step(s)

for name, expected, timeout, needs in STEPS:
    st = step_of[name]
    if name not in SELECTED:
        st.update({"status": "skipped", "error": "not selected (--steps)", "satisfies_needs": False})
        write_report()
        continue
    unmet = [n for n in needs if not satisfied(n)]
    if unmet:
        behind = bool(step_of[unmet[0]].get("unfinished"))  # behind a step the budget (or a signal) left out
        st.update({"status": "skipped", "error": "not started: needs %s, which %s" % (unmet[0], "was skipped for the "
                   "budget" if behind else step_of[unmet[0]]["status"]), "unfinished": behind})
        write_report()
        continue
    left = remaining()
    if left < expected:  # never start what cannot finish in the budget
        st.update({"status": "skipped", "unfinished": True, "error": "not started: %.0f s of the %.0f s budget left, it "
                   "takes about %d s" % (max(left, 0), BUDGET_S, expected)})
        write_report()
        continue
    log("%s (expected ~%d s, timeout %d s)" % (name, expected, min(timeout, left)))
    current.update({"name": name, "t": time.time()})
    deadline = time.time() + min(timeout, left)
    try:
        if name == FAIL_STEP:
            raise RuntimeError("failed on purpose (--fail-step %s)" % name)
        FUNCS[name](deadline)
        st["status"] = "passed"
    except Skip as x:
        st.update({"status": "skipped", "error": str(x), "satisfies_needs": x.ok})
    except StepTimeout as x:
        st.update({"status": "timeout", "error": str(x)})
    except Exception as x:
        tb = traceback.format_exc().strip().splitlines()
        st.update({"status": "failed", "error": "%s: %s" % (type(x).__name__, x) +
                   ("" if isinstance(x, RuntimeError) else "\n" + "\n".join(tb[-4:]))})
    st["seconds"] = round(time.time() - current["t"], 1)
    current["name"] = None
    if st["status"] != "passed":
        log("%s: %s%s" % (name, st["status"], ": " + st["error"].splitlines()[0] if st["error"] else ""))
    write_report()

# ---- figures across steps -----------------------------------------------------------------
try:
    by_name = {r["name"]: r for r in report["runs"]}
    for s in seqs:
        a, b = by_name.get("ours_%d_notrace" % s, {}), by_name.get("ours_%d_trace" % s, {})
        if "step_ms" in a and "step_ms" in b:
            report["tracing_overhead"].append({"seq_length": s, "step_ms_off": a["step_ms"], "step_ms_on": b["step_ms"],
                                               "overhead": round(b["step_ms"] / a["step_ms"] - 1.0, 4)})
    for h in report["hf"]:
        ours = by_name.get("ours_%d_notrace" % h["seq_length"])
        if ours and "tokens_per_s" in ours and "tokens_per_s" in h:
            h["ours_over_hf_tokens_per_s"] = round(ours["tokens_per_s"] / h["tokens_per_s"], 3)
            if h.get("peak_memory_bytes") and ours.get("peak_memory_bytes"):
                h["ours_over_hf_peak_memory"] = round(ours["peak_memory_bytes"] / h["peak_memory_bytes"], 3)
            h["what_differs"] = HF_DIFFERS
except Exception as x:
    report["figures_error"] = "%s: %s" % (type(x).__name__, x)
write_report()
for r in report["runs"]:
    if "tokens_per_s" in r:
        log("%-22s %8.1f tok/s  %9.1f ms/step  peak %.2f GiB  %.4g TFLOP/s" % (r["name"], r["tokens_per_s"], r["step_ms"],
            r["peak_memory_bytes"] / 2**30, r["model_tflops_per_s"]))
for h in report["hf"]:
    if "tokens_per_s" in h:
        log("hf_%-19d %8.1f tok/s  %9.1f ms/step  ours/hf %.2fx" % (h["seq_length"], h["tokens_per_s"], h["step_ms"],
            h.get("ours_over_hf_tokens_per_s", float("nan"))))
for s in report["steps"]:
    log("  %-24s %-8s %6.1f s%s" % (s["name"], s["status"], s["seconds"], ("  " + s["error"].splitlines()[0][:120]) if s["error"] else ""))
log("report: %s (%s, %.0f s)" % (os.path.join(out, "report.json"), "ok" if report["ok"] else ("FAILED: " + "; ".join(
    report["failures"])) if report["failures"] else "INCOMPLETE: skipped for the budget; finish with: " + report["rerun"],
    report["elapsed_s"]))
sys.exit(0 if report["ok"] else 1 if report["failures"] else 3)
PY
