#!/usr/bin/env python3
"""Before/after of the tiny demo's speed: two builds of ulysses-run + ulysses-worker side by side
in one run (bench/cpu; not a test).

For each sp, runs the demo (resources/configs/tiny.json, tracing off) with the base build and
the new build alternately, `--reps` times each (A/B pairs, because the shared machine's load
drifts between pairs), and prints ms/step and tokens/s of each (median of steps 2.. of each
run, then the median over runs) and the new/base speed ratio (per pair, then its median).
Threads per rank: cores / sp (the launcher's default), or --threads.
With --cpu-steps K, each build also runs K more steps in the same pair, and the CPU time of
the launcher and all ranks per step, (CPU of the long run - CPU of the short run) / K, is
printed for both with its ratio: on a machine shared with other work, CPU time moves much
less than wall time (no waiting for a core), so it is the steadier before/after figure.

--base-set / --new-set KEY=VALUE add a config override to one side only; with --base equal to
--build this compares two settings of one build (e.g. --new-set parallel.fused_qkv=true).

The base build is any other build directory, e.g. the commit before a change:
  git worktree add /tmp/base 3cf2bc7
  cmake -S /tmp/base -B /tmp/base/build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
  cmake --build /tmp/base/build -j2 --target ulysses-run ulysses-worker
  python3 bench/cpu/compare_builds.py --base /tmp/base/build [--build build] [--sp 1 --sp 2 --sp 4] [--reps 3] [--steps 8]
"""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from demo_run import ROOT, demo_step_cpu  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description="tiny demo tokens/s: base build vs new build, A/B pairs in one run")
    ap.add_argument("--base", required=True, help="build directory of the old code (app/run/ulysses-run, app/worker/ulysses-worker)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory of the new code")
    ap.add_argument("--sp", type=int, action="append", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads per rank (0 = cores / sp)")
    ap.add_argument("--cpu-steps", type=int, default=0, help="also measure CPU ms per step from runs of steps + K steps")
    ap.add_argument("--reference-ms", type=float, default=0.0,
                    help="an older published ms/step to print the new figure against (e.g. 159 for the pre-OpenBLAS sp-2 step)")
    ap.add_argument("--base-set", action="append", default=[], help="a --set KEY=VALUE for the base side only")
    ap.add_argument("--new-set", action="append", default=[], help="a --set KEY=VALUE for the new side only")
    a = ap.parse_args()
    for b in (a.base, a.build):
        for exe in ("app/run/ulysses-run", "app/worker/ulysses-worker"):
            if not os.access(os.path.join(b, exe), os.X_OK):
                sys.exit(f"compare_builds: {os.path.join(b, exe)} is missing; build ulysses-run and ulysses-worker there first")
    cores = os.cpu_count() or 1
    tokens = 512  # tiny.json: seq_length 512, micro batch 1, dp 1
    out = os.path.join(tempfile.mkdtemp(prefix="ulysses_builds_"), "run")
    print(f"tiny demo, {a.steps} steps per run, {a.reps} A/B pairs; base {a.base}, new {a.build}; "
          f"libblas.so.3 -> {os.path.realpath('/usr/lib/x86_64-linux-gnu/libblas.so.3')}"
          + (f"; base --set {' '.join(a.base_set)}" if a.base_set else "") + (f"; new --set {' '.join(a.new_set)}" if a.new_set else ""))
    head = f"{'sp':>3} {'thr/rank':>8} {'base ms':>8} {'new ms':>8} {'base tok/s':>10} {'new tok/s':>10} {'new/base speed':>15}"
    if a.reference_ms:
        head += f" {'vs ' + format(a.reference_ms, 'g') + ' ms':>10}"
    if a.cpu_steps:
        head += f" {'base CPU ms':>11} {'new CPU ms':>10} {'CPU new/base speed':>18}"
    print(head)
    for sp in a.sp or [1, 2, 4]:
        threads = a.threads or max(1, cores // sp)
        base, new, ratios, cbase, cnew, cratios = [], [], [], [], [], []
        for _ in range(a.reps):
            b, bc = demo_step_cpu(a.base, sp, threads, a.steps, out, dict(os.environ), "compare_builds (base)", a.base_set)
            n, nc = demo_step_cpu(a.build, sp, threads, a.steps, out, dict(os.environ), "compare_builds (new)", a.new_set)
            base.append(b)
            new.append(n)
            ratios.append(b / n)
            if a.cpu_steps:
                _, bl = demo_step_cpu(a.base, sp, threads, a.steps + a.cpu_steps, out, dict(os.environ), "compare_builds (base)", a.base_set)
                _, nl = demo_step_cpu(a.build, sp, threads, a.steps + a.cpu_steps, out, dict(os.environ), "compare_builds (new)", a.new_set)
                cbase.append((bl - bc) * 1e3 / a.cpu_steps)
                cnew.append((nl - nc) * 1e3 / a.cpu_steps)
                cratios.append(cbase[-1] / cnew[-1])
        bm, nm = statistics.median(base), statistics.median(new)
        line = (f"{sp:>3} {threads:>8} {bm:>8.1f} {nm:>8.1f} {tokens / bm * 1e3:>10.0f} {tokens / nm * 1e3:>10.0f} "
                f"{statistics.median(ratios):>14.2f}x")
        if a.reference_ms:
            line += f" {a.reference_ms / nm:>9.2f}x"
        if a.cpu_steps:
            line += f" {statistics.median(cbase):>11.1f} {statistics.median(cnew):>10.1f} {statistics.median(cratios):>17.2f}x"
        print(line)
        print(f"    per-pair speed ratios: {' '.join(f'{r:.2f}' for r in ratios)}" +
              (f"; CPU: {' '.join(f'{r:.2f}' for r in cratios)}" if a.cpu_steps else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
