#!/usr/bin/env python3
"""The product's library graph, from CMake's --graphviz output, checked to point one way.

    tools/check_library_graph.py SOURCE_DIR [--print]

(configures SOURCE_DIR once more in a temporary folder, so a build folder in use is left alone)

Each ulysses_* library has a floor; a library may link only libraries on lower floors. In
particular engine/launch links the profiler's common room, never the profiler; the engine
links the profiler's record room (and what it stands on), never the loader, the analysis or
the exports; the common and base rooms link nothing of ours. ulysses_profiler is an interface
library of every room, above them all.

The profiler's rooms share one include tree, so a link alone does not stop a room from
including a higher room's header (and using what is inline in it). The includes are checked
too: each header of the profiler belongs to a room (HEADER_ROOMS), each source to the room
whose source list names it (profiler/CMakeLists.txt), and a profiler, engine, launcher or cost
model file may include the profiler headers of its own library and of those it links, directly
or not. Exit 1 naming each include that does not. Exit 1 naming each edge that points up or sideways."""
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
    "ulysses_data": 2,
    "ulysses_prof_load": 3,
    "ulysses_prof_analysis": 3,
    "ulysses_engine": 3,
    "ulysses_prof_cache": 4,
    "ulysses_sim": 4,
    "ulysses_prof_export": 4,
    "ulysses_nccl_compile_check": 4,
    "ulysses_profiler": 5,
    "ulysses_testdata": 6,
    "ulysses_timeline_core": 6,
    "ulysses_ui_trace": 7,
    "ulysses_ui_models": 7,
    "ulysses_ui": 8,
}

# The room of each profiler header (profiler/README.md, "Rooms"), by file name without .hpp:
# the public ones (profiler/include, profiler/common/include) and those internal to profiler/src.
HEADER_ROOMS = {
    "ulysses_prof_common": ["atomic_file", "run_layout", "step_stats", "units", "write_error"],
    "ulysses_prof_base": ["phase", "nsys_ids", "schema", "memory_categories", "document_shard", "parallel", "sqlite_db",
                          "strfmt"],
    "ulysses_prof_record": ["tracer", "trace_writer", "clock_sync", "gpu_activity", "cupti_setup"],
    "ulysses_prof_model": ["trace_model", "range_store"],
    "ulysses_prof_load": ["trace_store", "trace_path", "load_options", "rank_file_cache", "trace_cache_key", "trace_loading",
                          "cache_io"],
    "ulysses_prof_analysis": ["analysis", "compare"],
    "ulysses_prof_cache": ["summary_cache", "trace_overview", "trace_open", "cache_location", "cache_key"],
    "ulysses_prof_export": ["report", "html_report", "chrome_export"],
}
# Folders whose files all belong to one library, besides the profiler's source lists.
FOLDER_LIBRARIES = {
    "profiler/common": "ulysses_prof_common",
    "engine/core": "ulysses_engine",
    "engine/launch": "ulysses_launch",
    "engine/cost": "ulysses_cost",
    "engine/data": "ulysses_data",
    "engine/sim": "ulysses_sim",
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


def source_rooms(source):
    """profiler/src file -> its room, from the source lists of profiler/CMakeLists.txt."""
    text = open(os.path.join(source, "profiler", "CMakeLists.txt")).read()
    rooms = {"src/schema_sql.cpp.in": "ulysses_prof_base"}  # configured into the base room's schema_sql.cpp
    calls = re.findall(r"ulysses_prof_room\((\w+)\s([^)]*)\)", text)
    calls += re.findall(r"target_sources\(ulysses_prof_(\w+)\s+PRIVATE\s([^)]*)\)", text)
    for room, files in calls:
        for f in re.findall(r"src/[\w/.]+", files):
            rooms[f] = "ulysses_prof_" + room
    return rooms


def include_problems(source, es):
    """Includes of profiler headers that reach above the including file's library."""
    header_room = {h: room for room, hs in HEADER_ROOMS.items() for h in hs}
    links = {}
    for a, b in es:
        links.setdefault(a, set()).add(b)

    def reach(lib):
        seen, todo = {lib}, [lib]
        while todo:
            for b in links.get(todo.pop(), ()):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    src_room = source_rooms(source)
    files = []  # (path relative to source, library)
    for top, lib in FOLDER_LIBRARIES.items():
        for d, _, names in os.walk(os.path.join(source, top)):
            files += [(os.path.relpath(os.path.join(d, n), source), lib) for n in names if n.endswith((".cpp", ".hpp"))]
    bad = []
    for base in ("profiler/src", "profiler/include/ulysses/profiler"):
        for d, _, names in os.walk(os.path.join(source, base)):
            for n in names:
                rel = os.path.relpath(os.path.join(d, n), source)
                stem = n.split(".")[0]
                lib = header_room.get(stem) if n.endswith(".hpp") else src_room.get(os.path.relpath(rel, "profiler"))
                if lib is None:
                    where = "HEADER_ROOMS" if n.endswith(".hpp") else "a source list in profiler/CMakeLists.txt"
                    bad.append(f"{rel}: in no room of the profiler (add it to {where})")
                else:
                    files.append((rel, lib))
    for rel, lib in files:
        allowed = reach(lib)
        in_profiler_src = rel.startswith("profiler/src/")
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', open(os.path.join(source, rel)).read(), re.M):
            if inc.startswith("ulysses/profiler/"):
                stem = os.path.basename(inc)[: -len(".hpp")]
            elif in_profiler_src and "/" not in inc and inc.endswith(".hpp"):
                stem = inc[: -len(".hpp")]
            else:
                continue
            room = header_room.get(stem)
            if room is None:
                bad.append(f"{rel}: includes {inc}, a header in no room (add it to HEADER_ROOMS in {sys.argv[0]})")
            elif room not in allowed:
                bad.append(f"{rel} ({lib}) includes {inc} ({room}): a room its library does not link")
    return bad


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
    bad += include_problems(sys.argv[1], es)
    if "--print" in sys.argv:
        for a, b in es:
            if b != "ulysses_warnings":
                print(f"{a} -> {b}")
    for line in bad:
        print(line)
    if not bad:
        print(f"library graph points down: {len(es)} edges between {len(FLOORS)} libraries; "
              "every profiler header included by a library that links its room")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
