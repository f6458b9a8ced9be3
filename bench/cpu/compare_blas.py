#!/usr/bin/env python3
"""Reference BLAS vs OpenBLAS-OpenMP vs OpenBLAS-pthread, side by side in one run (bench/cpu).

Debian's libtorch calls libblas.so.3; LD_LIBRARY_PATH pointing at one variant's directory
makes this process tree load that variant whatever update-alternatives selects, so the three
are compared in one run, alternated `--reps` times (the shared machine's load drifts, so
compare the ratios within this run, not absolute times across runs). Thread settings per
variant: intra-op threads T = cores / ranks (at::set_num_threads, also omp_set_num_threads),
OMP_NUM_THREADS=T and OPENBLAS_NUM_THREADS=T (the pthread build's own pool), and
OMP_WAIT_POLICY=PASSIVE as ulysses-run sets it (unless exported). Figures:
  gemm1 / gemmT  the tiny demo's GEMMs (bench_gemm --small: forward + both backward GEMMs
                 of every linear, attention scores) at 1 and at all cores' threads, GFLOP/s
  sp1 / sp2      tiny demo (resources/configs/tiny.json, tracing off) ms/step, median of
                 steps 2.. of each run, at sp 1 (T = cores) and sp 2 (T = cores / 2)
  /usr/bin/python3 bench/cpu/compare_blas.py [--build build] [--reps 3] [--steps 8]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

from demo_run import demo_step_ms

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LIB = "/usr/lib/x86_64-linux-gnu"
VARIANTS = [("reference", f"{LIB}/blas"), ("openblas-openmp", f"{LIB}/openblas-openmp"), ("openblas-pthread", f"{LIB}/openblas-pthread")]


def env_for(libdir, threads):
    e = dict(os.environ, LD_LIBRARY_PATH=libdir, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    e.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as ulysses-run sets it; export ACTIVE to see libgomp's spinning
    return e


def gemm(build, libdir, cores):
    out = subprocess.run([os.path.join(build, "bench/cpu/bench_gemm"), "--small", "1", str(cores)], env=env_for(libdir, cores),
                         capture_output=True, text=True, check=True).stdout
    blas = out.splitlines()[0]
    line = next(l for l in out.splitlines() if l.startswith("tiny demo GEMMs together"))
    rates = [float(x) for x in re.findall(r"thr:\s+[\d.]+\s+([\d.]+)", line)]
    peak = float(re.search(r"one-core peak: ([\d.]+)", out).group(1))
    return blas, rates, peak


def demo(build, libdir, sp, threads, steps):
    return demo_step_ms(build, sp, threads, steps, "/tmp/ulysses_bench/blas", env_for(libdir, threads), "compare_blas")


def main():
    ap = argparse.ArgumentParser(description="BLAS variants side by side")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--no-demo", action="store_true")
    a = ap.parse_args()
    cores = os.cpu_count() or 1
    res = {v: {"g1": [], "gT": [], "peak": [], "sp1": [], "sp2": []} for v, _ in VARIANTS}
    for rep in range(a.reps):
        for v, d in VARIANTS:
            blas, rates, peak = gemm(a.build, d, cores)
            if rep == 0:
                print(f"{v:>17}: {blas}", flush=True)
            res[v]["g1"].append(rates[0])
            res[v]["gT"].append(rates[-1])
            res[v]["peak"].append(peak)
            if not a.no_demo:
                res[v]["sp1"].append(demo(a.build, d, 1, cores, a.steps))
                res[v]["sp2"].append(demo(a.build, d, 2, max(1, cores // 2), a.steps))
    med = lambda x: statistics.median(x) if x else float("nan")
    ref = res["reference"]
    print(f"\n{a.reps} alternations, {cores} cores; medians (vs reference: reference time / this time)")
    print(f"{'BLAS':>17} {'peak1 GF/s':>10} {'gemm 1thr GF/s':>15} {f'gemm {cores}thr GF/s':>15} {'sp1 ms/step':>12} {'vs ref':>7} {'sp2 ms/step':>12} {'vs ref':>7}")
    for v, _ in VARIANTS:
        r = res[v]
        print(f"{v:>17} {med(r['peak']):>10.1f} {med(r['g1']):>15.2f} {med(r['gT']):>15.2f} {med(r['sp1']):>12.1f} "
              f"{med(ref['sp1']) / med(r['sp1']) if r['sp1'] else float('nan'):>6.2f}x {med(r['sp2']):>12.1f} "
              f"{med(ref['sp2']) / med(r['sp2']) if r['sp2'] else float('nan'):>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
