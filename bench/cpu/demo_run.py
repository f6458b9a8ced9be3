"""One tiny-demo run through ulysses-run --json for the CPU drivers (compare_blas.py,
compare_threads.py, compare_builds.py): the median step time in ms after two warm-up steps,
or (demo_step_cpu) also the CPU time the launcher and all its ranks used."""
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def demo_step_ms(build, sp, threads, steps, out, env, who, sets=()):
    return demo_step_cpu(build, sp, threads, steps, out, env, who, sets)[0]


def demo_step_cpu(build, sp, threads, steps, out, env, who, sets=()):
    """(median step ms after two warm-up steps, CPU seconds of ulysses-run and its workers);
    `sets` are extra --set KEY=VALUE overrides."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(build, "app/run/ulysses-run"), os.path.join(ROOT, "resources/configs/tiny.json"), "--json", "--worker",
           os.path.join(build, "app/worker/ulysses-worker"), "--out", out, "--set", f"parallel.sp_size={sp}", "--set", f"train.steps={steps}",
           "--set", "profile.enabled=false", "--set", f"train.threads_per_rank={threads}"]
    for kv in sets:
        cmd += ["--set", kv]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    if p.returncode != 0:
        sys.exit(f"{who}: run failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    return statistics.median(r["step_ms"] for r in rows[2:]), cpu_s
