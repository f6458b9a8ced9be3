#!/usr/bin/env python3
"""Per-phase time of a traced run, ms per step, for side-by-side runs (bench/cpu; not a test).

Reads RUN/trace/rank*.sqlite (ULYSSES_RANGES joined to NVTX_EVENTS), sums each phase's
ranges per direction over steps >= --skip, divides by the number of those steps, and prints
the mean over ranks with the per-rank values, one column per run. Ranges nest (step >
backward > attention ...), so the rows do not add up; communication rows are wall time spent
waiting in the collective (on an oversubscribed machine: mostly waiting for the peers).
`ulysses-trace summary RUN` gives the product's own compute / comm / idle split per rank.

  python3 bench/cpu/trace_phases.py RUN [RUN...] [--skip 2]
"""
import argparse
import collections
import glob
import sqlite3
import statistics
import sys

DIRS = {0: "", 1: "fwd", 2: "bwd", 3: "recompute"}


def phases(run, skip):
    tot, steps = collections.defaultdict(list), []
    dbs = sorted(glob.glob(run + "/trace/rank*.sqlite"))
    if not dbs:
        sys.exit(f"trace_phases: no {run}/trace/rank*.sqlite")
    for db in dbs:
        c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        names = dict(c.execute("select id, name from ULYSSES_PHASES"))
        n = c.execute("select count(*) from ULYSSES_STEPS where step >= ?", (skip,)).fetchone()[0]
        steps += [r[0] for r in c.execute("select stepMs from ULYSSES_STEPS where step >= ?", (skip,))]
        for p, d, s in c.execute("select r.phase, r.direction, sum(e.end - e.start) from ULYSSES_RANGES r "
                                 "join NVTX_EVENTS e on e.rowid = r.eventId where r.step >= ? group by r.phase, r.direction", (skip,)):
            tot[f"{names[p]} {DIRS.get(d, d)}".strip()].append(s / 1e6 / max(1, n))
    return tot, statistics.median(steps) if steps else float("nan")


def main():
    ap = argparse.ArgumentParser(description="per-phase ms per step of traced runs, side by side")
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--skip", type=int, default=2, help="warm-up steps left out")
    a = ap.parse_args()
    res = [phases(r, a.skip) for r in a.runs]
    keys = sorted({k for t, _ in res for k in t}, key=lambda k: -statistics.mean(res[0][0].get(k, [0])))
    print(f"{'phase':>24} " + " ".join(f"{r[-28:]:>30}" for r in a.runs))
    print(f"{'median step_ms':>24} " + " ".join(f"{m:>30.1f}" for _, m in res))
    for k in keys:
        cells = []
        for t, _ in res:
            v = t.get(k)
            cells.append(f"{statistics.mean(v):8.2f} ({' '.join(f'{x:.1f}' for x in v)})" if v else "-")
        print(f"{k:>24} " + " ".join(f"{c:>30}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
