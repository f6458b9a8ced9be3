"""One tiny-demo run through ulysses-run --json for the CPU drivers (compare_blas.py,
compare_threads.py): the median step time in ms after two warm-up steps."""
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def demo_step_ms(build, sp, threads, steps, out, env, who):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(build, "app/run/ulysses-run"), os.path.join(ROOT, "resources/configs/tiny.json"), "--json", "--worker",
           os.path.join(build, "app/worker/ulysses-worker"), "--out", out, "--set", f"parallel.sp_size={sp}", "--set", f"train.steps={steps}",
           "--set", "profile.enabled=false", "--set", f"train.threads_per_rank={threads}"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"{who}: run failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return statistics.median(r["step_ms"] for r in rows[2:])
