#!/usr/bin/env python3
"""CTest's longest-first schedule on a clean build folder.

With -j N, ctest starts the tests it knows to be long first, from the build folder's
Testing/Temporary/CTestCostData.txt. A clean clone has none, so ctest starts them in declaration
order, and a 90 s test that happens to come last stretches the run by up to its own length.
tests/ctest_costs.txt keeps the figures (seconds on the 2-core CI machine, the most any lane
measured); `seed BUILD` writes them where ctest reads them unless the folder has its own, and
`update BUILD...` refreshes the file from build folders' measured costs.

  tools/ctest_costs.py seed BUILD
  tools/ctest_costs.py update BUILD [BUILD...]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KEPT = os.path.join(HERE, "..", "tests", "ctest_costs.txt")
MIN_SECONDS = 2.0  # shorter tests are not worth scheduling


def cost_file(build):
    return os.path.join(build, "Testing", "Temporary", "CTestCostData.txt")


def read_costs(path):
    costs = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("---"):
                break
            parts = line.split()
            if len(parts) == 3:
                try:
                    costs[parts[0]] = float(parts[2])
                except ValueError:
                    pass
    return costs


def main(argv):
    if len(argv) < 3 or argv[1] not in ("seed", "update"):
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    if argv[1] == "seed":
        target = cost_file(argv[2])
        if os.path.exists(target) or not os.path.exists(KEPT):
            return 0
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(KEPT, encoding="utf-8") as src, open(target, "w", encoding="utf-8") as dst:
            for line in src:
                if not line.startswith("#"):
                    dst.write(line)
        return 0
    merged = {}
    for build in argv[2:]:
        path = cost_file(build)
        if not os.path.exists(path):
            print(f"ctest_costs: {path} not found (run ctest in {build} first)", file=sys.stderr)
            return 2
        for name, s in read_costs(path).items():
            merged[name] = max(merged.get(name, 0.0), s)
    with open(KEPT, "w", encoding="utf-8") as f:
        f.write("# name runs seconds: tools/ctest_costs.py (ctest's longest-first order on a clean build)\n")
        for name, s in sorted(merged.items(), key=lambda kv: -kv[1]):
            if s >= MIN_SECONDS:
                f.write(f"{name} 1 {s:.1f}\n")
        f.write("---\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
