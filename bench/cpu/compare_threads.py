#!/usr/bin/env python3
"""Threads per rank at P = 1, 2, 4 ranks, side by side in one run (bench/cpu; not a test).

The tiny demo (resources/configs/tiny.json, tracing off) at each sp with threads_per_rank
T = 1, 2, ... cores (the worker sets at::set_num_threads(T), one inter-op thread and
OpenBLAS's pool to T; the launcher exports OMP_NUM_THREADS / OPENBLAS_NUM_THREADS = T),
alternated `--reps` times; the row marked * is the default (cores / P, at least 1).
P x T > cores oversubscribes. Medians of steps 2.. of each run, then over runs.
  python3 bench/cpu/compare_threads.py [--build build] [--reps 2] [--steps 8]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def demo(build, sp, threads, steps):
    out = "/tmp/ulysses_bench/threads"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(build, "app/run/ulysses-run"), os.path.join(ROOT, "resources/configs/tiny.json"), "--json", "--worker",
           os.path.join(build, "app/worker/ulysses-worker"), "--out", out, "--set", f"parallel.sp_size={sp}", "--set", f"train.steps={steps}",
           "--set", "profile.enabled=false", "--set", f"train.threads_per_rank={threads}"]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}  # the launcher sets them
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"compare_threads: run failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return statistics.median(r["step_ms"] for r in rows[2:])


def main():
    ap = argparse.ArgumentParser(description="threads per rank at sp 1, 2, 4")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    thread_options = sorted({1, max(1, cores // 2), cores})
    cases = [(sp, t) for sp in (1, 2, 4) for t in thread_options]
    res = {c: [] for c in cases}
    for _ in range(a.reps):
        for c in cases:
            res[c].append(demo(a.build, c[0], c[1], a.steps))
    print(f"libblas.so.3 -> {os.path.realpath('/usr/lib/x86_64-linux-gnu/libblas.so.3')}; {cores} cores; {a.reps} alternations")
    print(f"{'sp':>3} {'thr/rank':>9} {'ranks x thr':>11} {'ms/step':>9} {'tokens/s':>9} {'vs default':>10}")
    for sp in (1, 2, 4):
        default = max(1, cores // sp)
        base = statistics.median(res[(sp, default)])
        for t in thread_options:
            ms = statistics.median(res[(sp, t)])
            print(f"{sp:>3} {t:>8}{'*' if t == default else ' '} {sp * t:>11} {ms:>9.1f} {512 / ms * 1000:>9.0f} {base / ms:>9.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
