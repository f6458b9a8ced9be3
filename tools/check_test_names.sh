#!/usr/bin/env bash
# Test files are named after what they test (docs/CODING.md, "Tests"): a unit test file
# tests/<lib>/test_<name>.cpp tests the source <name>.cpp / <name>.hpp of the product (engine/,
# profiler/, ui/, app/, common/), one test file per source; tests that span sources (several
# programs, a whole run, a studio page driven end to end) live in tests/e2e/ or in a
# tests/<lib>/behaviour/ folder and may be named after the behaviour.
#
#   tools/check_test_names.sh
#
# Prints each test file that breaks the rule; exit 1 when there is one, 0 otherwise.
# KNOWN lists the files that still break it (owned by other work when the rule went in: issue 52);
# the list only shrinks.
set -euo pipefail
cd "$(dirname "$0")/.."
KNOWN=""
dirs=""
for d in engine profiler ui app common; do [ -d "$d" ] && dirs="$dirs $d"; done
# Every product source's name (without .cpp / .hpp), once.
sources="$(find $dirs \( -name '*.cpp' -o -name '*.hpp' \) -printf '%f\n' | sed -E 's/\.(cpp|hpp)$//' | sort -u)"
bad=0
declare -A seen=()
while IFS= read -r f; do
  case "$f" in tests/e2e/* | */behaviour/*) continue ;; esac
  case " $KNOWN " in *" $f "*) continue ;; esac
  name="$(basename "$f" .cpp)"
  name="${name#test_}"
  if ! grep -qxF "$name" <<<"$sources"; then
    echo "$f: no source $name.cpp or $name.hpp in$dirs: name it test_<source>.cpp after the source it tests," \
      "or move it to tests/e2e/ or tests/<lib>/behaviour/ when it spans sources"
    bad=1
  elif [ -n "${seen[$name]:-}" ]; then
    echo "$f: ${seen[$name]} already tests $name: one unit test file per source"
    bad=1
  fi
  seen[$name]="$f"
done < <(git ls-files -co --exclude-standard 'tests/*test_*.cpp' | grep -E '/test_[^/]*\.cpp$' | sort)
if [ "$bad" -eq 0 ]; then
  echo "test files are named after their sources (behaviour tests in tests/e2e/ and tests/*/behaviour/)"
fi
exit "$bad"
