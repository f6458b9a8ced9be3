#!/usr/bin/env bash
# Checks that the project's C++ sources match .clang-format (clang-format 14, Debian's
# clang-format-14): CTest Format.SourcesMatchClangFormat. Exit 1 lists the files to fix
# (fix them with: tools/check_format.sh --fix), 77 (skipped) without clang-format-14.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CF="$(command -v clang-format-14 || true)"
if [ -z "$CF" ]; then echo "check_format.sh: no clang-format-14 (./ulysses setup installs it); skipped" >&2; exit 77; fi
mapfile -t files < <(cd "$ROOT" && find app engine profiler ui tests bench fuzz tools testdata \
  \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' \) -not -path 'tests/data/*' -print | sort)
cd "$ROOT"
if [ "${1:-}" = "--fix" ]; then "$CF" -i "${files[@]}"; exit 0; fi
bad=()
for f in "${files[@]}"; do
  # A file another test created and removed after the listing is not a formatting defect.
  [ -f "$f" ] || continue
  "$CF" --dry-run --Werror "$f" >/dev/null 2>&1 || { [ -f "$f" ] && bad+=("$f"); }
done
if ((${#bad[@]})); then
  echo "not formatted (.clang-format): ${bad[*]}" >&2
  echo "fix: tools/check_format.sh --fix" >&2
  exit 1
fi
echo "${#files[@]} files match .clang-format"
