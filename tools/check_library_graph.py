#!/usr/bin/env python3
"""The product's library graph, from CMake's --graphviz output, checked to point one way.

    tools/check_library_graph.py SOURCE_DIR [--print]

(configures SOURCE_DIR once more in a temporary folder, so a build folder in use is left alone)

Each ulysses_* library has a floor; a library may link only libraries on lower floors. In
particular engine/launch links the profiler's common room, never the profiler; the engine
links the profiler's record room (and what it stands on), never the loader, the analysis or
the exports; the common and base rooms link nothing of ours. ulysses_profiler is an interface
library of every room, above them all. Exit 1 naming each edge that points up or sideways."""
import os
import re
import subprocess
import sys
import tempfile

FLOORS = {
    "ulysses_warnings": 0,
    "ulysses_prof_common": 1,
    "ulysses_prof_base": 1,
    "ulysses_config": 1,
    "ulysses_prof_record": 2,
    "ulysses_prof_model": 2,
    "ulysses_cost": 2,
    "ulysses_launch": 2,
    "ulysses_prof_load": 3,
    "ulysses_prof_analysis": 3,
    "ulysses_engine": 3,
    "ulysses_prof_cache": 4,
    "ulysses_prof_export": 4,
    "ulysses_nccl_compile_check": 4,
    "ulysses_profiler": 5,
    "ulysses_testdata": 6,
    "ulysses_timeline_core": 6,
    "ulysses_ui_trace": 7,
    "ulysses_ui_models": 7,
    "ulysses_ui": 8,
}


def edges(source):
    with tempfile.TemporaryDirectory() as d:
        dot = os.path.join(d, "deps.dot")
        subprocess.run(["cmake", "-S", source, "-B", os.path.join(d, "b"), "--graphviz=" + dot],
                       check=True, stdout=subprocess.DEVNULL)
        text = open(dot).read()
    names = {n: label.split("\\n")[0] for n, label in re.findall(r'"(node\d+)" \[ label = "([^"]+)"', text)}
    out = set()
    for a, b in re.findall(r'"(node\d+)" -> "(node\d+)"', text):
        la, lb = names.get(a, ""), names.get(b, "")
        if la.startswith("ulysses_") and lb.startswith("ulysses_"):
            out.add((la, lb))
    return sorted(out)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    es = edges(sys.argv[1])
    bad = []
    for a, b in es:
        if a not in FLOORS or b not in FLOORS:
            bad.append(f"{a} -> {b}: a library without a floor (add it to FLOORS in {sys.argv[0]})")
        elif FLOORS[b] >= FLOORS[a]:
            bad.append(f"{a} (floor {FLOORS[a]}) -> {b} (floor {FLOORS[b]}): points up or sideways")
    if "--print" in sys.argv:
        for a, b in es:
            if b != "ulysses_warnings":
                print(f"{a} -> {b}")
    for line in bad:
        print(line)
    if not bad:
        print(f"library graph points down: {len(es)} edges between {len(FLOORS)} libraries")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
