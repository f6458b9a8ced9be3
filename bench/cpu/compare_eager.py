#!/usr/bin/env python3
"""Engine vs PyTorch-eager training step, side by side in one run (bench/cpu; not a test).

For each sp, runs the engine (ulysses-run, one process per rank, tracing off) and
eager_step.py (one process per rank, torch.distributed Gloo when sp > 1) alternately, `--reps` times
each, from the same safetensors init (train.init_from), on the same batches, with the same
intra-op threads per rank (cores / sp, or --threads), OPENBLAS_NUM_THREADS / OMP_NUM_THREADS the same and
OMP_WAIT_POLICY=PASSIVE, as ulysses-run sets them for the engine's workers. Prints one table: sp, engine ms/step, eager ms/step, ratio
(medians of steps 2.. of each run, then the median over runs; the ratio is per A/B pair,
then its median, because the shared machine's load drifts between pairs), and the
first-step losses of both with their difference (same weights + same tokens: they agree to
float32 rounding), the second step's loss difference (after one AdamW step: AdamW's first
update is ~lr*sign(g), so gradients that differ in rounding move tiny-gradient weights
differently) and the relative difference of the first step's gradient norm (all gradients).

With --cpu-steps K, each side also runs K more steps in the same pair, and the CPU time of all
its processes per step, (CPU of the long run - CPU of the short run) / K, is printed with its
ratio: on a shared machine CPU time moves much less than wall time.

  /usr/bin/python3 bench/cpu/compare_eager.py [--build build] [--steps 8] [--reps 3]
        [--sp 1 --sp 2 --sp 4] [--threads T] [--cpu-steps K] [--set train.seq_length=1024]...
"""
import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def median_after(rows, key, skip=2):
    v = [r[key] for r in rows[skip:]] or [r[key] for r in rows]
    return statistics.median(v)


def child_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cpu_of(f, *args):
    """(f's result, CPU seconds of the child processes it ran and waited for)."""
    c0 = child_cpu_s()
    res = f(*args)
    return res, child_cpu_s() - c0


def run_engine(build, cfg, sp, threads, steps, init, sets, out, env):
    cmd = [os.path.join(build, "app/run/ulysses-run"), cfg, "--json", "--worker", os.path.join(build, "app/worker/ulysses-worker"),
           "--out", out, "--set", f"parallel.sp_size={sp}", "--set", f"train.steps={steps}", "--set", f"train.threads_per_rank={threads}",
           "--set", f"train.init_from={init}", "--set", "profile.enabled=false"]
    for s in sets:
        cmd += ["--set", s]
    shutil.rmtree(out, ignore_errors=True)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"compare_eager: engine run failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_eager(cfg, sp, threads, steps, init, sets, env):
    """sp processes of eager_step.py (torch.distributed Gloo when sp > 1); rank 0's lines."""
    cmd = [sys.executable, os.path.join(HERE, "eager_step.py"), "--config", cfg, "--init", init, "--steps", str(steps), "--threads", str(threads)]
    for s in sets:
        cmd += ["--set", s]
    port = str(free_port())
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(env, RANK=str(r), WORLD_SIZE=str(sp), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)) for r in range(sp)]
    outs = [p.communicate(timeout=1800) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.exit(f"compare_eager: eager run failed ({p.returncode}): {' '.join(cmd)}\n{err[-2000:]}")
    return [json.loads(l) for l in outs[0][0].splitlines() if l.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description="engine vs PyTorch-eager step time, one table")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--config", default=os.path.join(ROOT, "resources/configs/tiny.json"))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sp", type=int, action="append", default=None)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads per rank (0 = cores / sp)")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--cpu-steps", type=int, default=0, help="also measure CPU ms per step from runs of steps + K steps")
    ap.add_argument("--check", type=float, default=0.0,
                    help="exit 1 when the step-0 loss or gradient norm differ by more than this (relative), e.g. 1e-5")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401  (Debian's python3-torch: same libtorch as the engine)
    except ImportError:
        sys.exit("compare_eager: this Python has no torch; run it with /usr/bin/python3 (Debian's python3-torch)")
    cores = os.cpu_count() or 1
    tmp = tempfile.mkdtemp(prefix="ulysses_eager_")
    init = os.path.join(tmp, "init")
    subprocess.run([sys.executable, os.path.join(HERE, "eager_step.py"), "--config", a.config, "--write-init", init] +
                   sum((["--set", s] for s in a.sets), []), check=True)
    print(f"config {os.path.relpath(a.config, ROOT)} {' '.join(a.sets)}; {a.steps} steps per run, {a.reps} A/B pairs; "
          f"libblas.so.3 -> {os.path.realpath('/usr/lib/x86_64-linux-gnu/libblas.so.3')}")
    print(f"{'sp':>3} {'thr/rank':>8} {'engine ms/step':>15} {'eager ms/step':>14} {'engine/eager':>13} {'loss0 engine':>13} {'loss0 eager':>12} {'|diff|':>9} {'loss1 |diff|':>12} {'gnorm0 rel':>10}"
          + (f" {'engine CPU ms':>13} {'eager CPU ms':>12} {'CPU engine/eager':>16}" if a.cpu_steps else ""))
    failed = False
    for sp in a.sp or [1]:
        threads = a.threads or max(1, cores // sp)
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")  # as ulysses-run sets them
        eng, eag, ratios, ecpu, pcpu, cratios = [], [], [], [], [], []
        for rep in range(a.reps):
            e, ec = cpu_of(run_engine, a.build, a.config, sp, threads, a.steps, init, a.sets, os.path.join(tmp, "run"), env)
            p, pc = cpu_of(run_eager, a.config, sp, threads, a.steps, init, a.sets, env)
            eng.append(e)
            eag.append(p)
            ratios.append(median_after(e, "step_ms") / median_after(p, "step_ms"))
            if a.cpu_steps:
                _, el = cpu_of(run_engine, a.build, a.config, sp, threads, a.steps + a.cpu_steps, init, a.sets, os.path.join(tmp, "run"), env)
                _, pl = cpu_of(run_eager, a.config, sp, threads, a.steps + a.cpu_steps, init, a.sets, env)
                ecpu.append((el - ec) * 1e3 / a.cpu_steps)
                pcpu.append((pl - pc) * 1e3 / a.cpu_steps)
                cratios.append(ecpu[-1] / pcpu[-1])
        em = statistics.median(median_after(r, "step_ms") for r in eng)
        pm = statistics.median(median_after(r, "step_ms") for r in eag)
        l0e, l0p = eng[0][0]["loss"], eag[0][0]["loss"]
        l1 = abs(eng[0][1]["loss"] - eag[0][1]["loss"]) if a.steps > 1 else float("nan")
        print(f"{sp:>3} {threads:>8} {em:>15.1f} {pm:>14.1f} {statistics.median(ratios):>12.2f}x {l0e:>13.6f} {l0p:>12.6f} {abs(l0e - l0p):>9.2e} {l1:>12.2e} {abs(eng[0][0]['grad_norm'] / eag[0][0]['grad_norm'] - 1):>10.1e}"
              + (f" {statistics.median(ecpu):>13.1f} {statistics.median(pcpu):>12.1f} {statistics.median(cratios):>15.2f}x" if a.cpu_steps else ""))
        print(f"    per-pair ratios: {' '.join(f'{r:.2f}' for r in ratios)}" + (f"; CPU: {' '.join(f'{r:.2f}' for r in cratios)}" if a.cpu_steps else ""))
        gn = abs(eng[0][0]["grad_norm"] / eag[0][0]["grad_norm"] - 1)
        if a.check > 0 and (abs(l0e - l0p) > a.check * abs(l0p) or gn > a.check):
            failed = True
            print(f"    FAIL: engine and eager differ beyond {a.check:g} (loss {abs(l0e - l0p):.3g}, grad norm {gn:.3g} relative)")
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
