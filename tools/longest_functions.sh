#!/usr/bin/env bash
# The longest functions of the product's code (common/, engine/, profiler/, ui/, app/), longest first,
# from universal-ctags' start and end lines (comments and blank lines inside count).
#
#   tools/longest_functions.sh [--top N] [--max LINES] [--allow K]
#
# --top N     how many to print (default 10)
# --max LINES the length a function should stay within (default 120: issue 52; 150 before)
# --allow K   exit 1 when more than K functions are longer than --max (default: never fail).
#             CTest's Code.LongestFunctions passes the count the tree had when the check
#             went in, so the number can only go down.
# Exit: 0, 1 (over --allow), 2 (bad usage or universal-ctags missing).
set -euo pipefail
cd "$(dirname "$0")/.."
top=10 max=120 allow=-1
while [ $# -gt 0 ]; do
  case "$1" in
    --top) top="${2:?}"; shift 2 ;;
    --max) max="${2:?}"; shift 2 ;;
    --allow) allow="${2:?}"; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "longest_functions: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$top" "$max" "$allow"; do
  [[ "$v" =~ ^-?[0-9]+$ ]] || { echo "longest_functions: '$v' is not a whole number" >&2; exit 2; }
done
if [[ "$(ctags --version 2>/dev/null || true)" != *"Universal Ctags"* ]]; then
  echo "longest_functions: needs universal-ctags (apt-get install universal-ctags; ./ulysses setup installs it)" >&2
  exit 2
fi
list="$(ctags --c++-kinds=f --fields=+ne -R --languages=C++ -f - common engine profiler ui app |
  awk -F'\t' '{ ln = ""; en = "";
                for (i = 4; i <= NF; i++) { if ($i ~ /^line:/) ln = substr($i, 6); if ($i ~ /^end:/) en = substr($i, 5) }
                if (ln != "" && en != "") printf "%d\t%s:%s\t%s\n", en - ln + 1, $2, ln, $1 }' | sort -t$'\t' -k1,1nr -k2,2)"
over="$(printf '%s\n' "$list" | awk -F'\t' -v m="$max" '$1 > m' | grep -c . || true)"
echo "Longest functions in common/, engine/, profiler/, ui/, app/ (lines, where, name):"
printf '%s\n' "$list" | awk -F'\t' -v n="$top" 'NR <= n { printf "  %5d  %-45s %s\n", $1, $2, $3 }'
echo "$over function(s) longer than $max lines."
if [ "$allow" -ge 0 ] && [ "$over" -gt "$allow" ]; then
  echo "longest_functions: $over functions are longer than $max lines, more than the $allow allowed: split the new ones" >&2
  exit 1
fi
