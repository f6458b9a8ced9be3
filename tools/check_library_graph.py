#!/usr/bin/env python3
"""The product's library graph, from CMake's --graphviz output, checked to point one way.

    tools/check_library_graph.py SOURCE_DIR [--print]

(configures SOURCE_DIR once more in a temporary folder, so a build folder in use is left alone)

Each ulysses_* library has a floor; a library may link only libraries on lower floors. In
particular engine/launch links the common floor (common/), never the profiler; the engine
links the profiler's record room (and what it stands on), never the loader, the analysis or
the exports; the common and base rooms link nothing of ours. ulysses_profiler is an interface
library of every room, above them all.

The rooms are read from the folders: each profiler/<room>/ with a CMakeLists.txt is a room,
its library named there, its public headers under profiler/<room>/include/ (and common/include/
for the floor's); no table of rooms is kept here. The compiler already refuses a header of a
room whose include root a target does not see; this also checks the includes of each room, of
the engine, the launcher and the cost model against what their library links, directly or
not, and that no source or header of the profiler lies outside a room. Exit 1 naming each
include that does not, each file in no room, and each edge that points up or sideways."""
import os
import re
import subprocess
import sys
import tempfile

FLOORS = {
    "ulysses_warnings": 0,
    "ulysses_common": 1,
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

# Folders whose files all belong to one library, besides the rooms (profiler/<room>/, common/).
FOLDER_LIBRARIES = {
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


def rooms(source):
    """Room folder (relative to source) -> its library, read from the folders: every
    profiler/<room>/ with a CMakeLists.txt, and the common floor (common/)."""
    out = {}
    candidates = [os.path.join("profiler", d) for d in sorted(os.listdir(os.path.join(source, "profiler")))]
    candidates.append("common")
    for folder in candidates:
        cmake = os.path.join(source, folder, "CMakeLists.txt")
        if not os.path.isfile(cmake):
            continue
        m = re.search(r"^\s*(?:ulysses_prof_room\((\w+)|add_library\((\w+))", open(cmake).read(), re.M)
        if m:
            out[folder] = "ulysses_prof_" + m.group(1) if m.group(1) else m.group(2)
    return out


def include_problems(source, es):
    """Includes of room headers that reach above the including file's library, and profiler
    files in no room."""
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

    def walk(top):
        for d, _, names in os.walk(os.path.join(source, top)):
            for n in names:
                if n.endswith((".cpp", ".hpp", ".cpp.in")):
                    yield os.path.relpath(os.path.join(d, n), source)

    bad = []
    room_of = rooms(source)
    header_room = {}  # "ulysses/profiler/x.hpp" -> library of the room whose include/ holds it
    for folder, lib in room_of.items():
        inc = os.path.join(folder, "include")
        for rel in walk(inc):
            name = os.path.relpath(rel, inc)
            if name in header_room:
                bad.append(f"{rel}: {name} is also a header of {header_room[name]}: one room per header")
            header_room[name] = lib
    files = []  # (path relative to source, library)
    for folder, lib in list(room_of.items()) + list(FOLDER_LIBRARIES.items()):
        files += [(rel, lib) for rel in walk(folder)]
    in_rooms = {rel for rel, _ in files}
    for rel in walk("profiler"):
        if rel not in in_rooms:
            bad.append(f"{rel}: in no room of the profiler (a room is a folder profiler/<room>/ with a CMakeLists.txt)")
    for rel, lib in files:
        allowed = reach(lib)
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', open(os.path.join(source, rel)).read(), re.M):
            room = header_room.get(inc)
            if inc.startswith(("ulysses/profiler/", "ulysses/common/")) and room is None:
                bad.append(f"{rel}: includes {inc}, a header of no room")
            elif room is not None and room not in allowed:
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
