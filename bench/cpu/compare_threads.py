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
import os
import statistics
import sys

from demo_run import demo_step_ms

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def demo(build, sp, threads, steps):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}  # the launcher sets them
    return demo_step_ms(build, sp, threads, steps, "/tmp/ulysses_bench/threads", env, "compare_threads")


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
