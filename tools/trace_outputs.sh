#!/usr/bin/env bash
# Every ulysses-trace command's output on fixed inputs, to show a refactor changes none of them
# byte for byte (issue 52): run it with the build before the change and the build after, on the
# same inputs, and compare the two output folders with `diff -r`.
#
#   tools/trace_outputs.sh inputs BUILD INPUTS   make the inputs once (two short CPU runs of ours,
#                                                sp 2 and sp 2 x dp 2, and a simulated sp 4 run;
#                                                the two real Nsight exports of ../shared/realdata
#                                                and the Kineto pair of tests/data when present)
#   tools/trace_outputs.sh run BUILD INPUTS OUT  summary (table, JSON; no cache, cold, warm, a step
#                                                window), export (whole, one rank, per rank), report,
#                                                prepare, compare: each command's stdout, stderr and
#                                                exit code, and the files it writes, into OUT
#
# Inputs are copied (times kept) to a fixed folder for each run, so that messages naming a path
# read the same; caches go to a fixed XDG_CACHE_HOME; the output folder's path and "in 0.01 s"
# timings are normalised. Exit 0, or 2 on bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  inputs) [ $# -eq 3 ] || { usage >&2; exit 2; } ;;
  run) [ $# -eq 4 ] || { usage >&2; exit 2; } ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
BUILD="$(cd "$2" 2>/dev/null && pwd)" || { echo "trace_outputs: no build folder $2" >&2; exit 2; }
if [ "$1" = inputs ]; then
  mkdir -p "$3" && IN="$(cd "$3" && pwd)"
  R="$BUILD/app/run/ulysses-run"
  make_run() {
    local name="$1"; shift
    "$R" resources/configs/tiny.json "$@" --out "$IN/$name" >"$IN/$name.log" 2>&1 ||
      { echo "trace_outputs: ulysses-run for $name failed (exit $?): $IN/$name.log" >&2; exit 1; }
    rm -f "$IN/$name.log"
  }
  make_run cpu_sp2 --set parallel.sp_size=2 --set train.steps=3
  make_run cpu_sp2dp2 --set parallel.sp_size=2 --set parallel.dp_size=2 --set train.steps=3
  make_run sim_sp4 --set parallel.sp_size=4 --simulate cpu-ranks
  for f in ../shared/realdata/h100_2gpu_1s.sqlite ../shared/realdata/mfu_2gpu_before.sqlite; do
    [ -f "$f" ] && cp "$f" "$IN/"
  done
  mkdir -p "$IN/kineto" && cp tests/data/foreign/kineto_2rank/*.json "$IN/kineto/"
  find "$IN" -name '.ulysses-*' -exec rm -rf {} +  # no cache, no claim: every run starts cold
  # Settled: a trace modified in the last seconds is taken as still being written (no cache).
  find "$IN" -exec touch -h -d '2026-01-01 00:00:00' {} +
  echo "trace_outputs: inputs in $IN"
  exit 0
fi
IN="$(cd "$3" 2>/dev/null && pwd)" || { echo "trace_outputs: no inputs folder $3" >&2; exit 2; }
mkdir -p "$4" && OUT="$(cd "$4" && pwd)"
T="$BUILD/app/trace/ulysses-trace"
exec 9>/tmp/ulysses-trace-outputs.lock && flock 9
W=/tmp/ulysses-trace-outputs-work
rm -rf "$W" "$W.cache" && cp -a "$IN" "$W" && cd "$W" || exit 1
export XDG_CACHE_HOME="$W.cache"
one() { local name="$1"; shift; "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"; echo "rc=$?" >>"$OUT/$name.out"; }
for i in $(ls); do
  one "$i.summary.nocache" "$T" summary "$i" --no-cache
  one "$i.summary.json.nocache" "$T" summary "$i" --json --no-cache
  one "$i.summary.cold" "$T" summary "$i"
  one "$i.summary.warm" "$T" summary "$i"
  one "$i.summary.json.warm" "$T" summary "$i" --json
  one "$i.summary.steps" "$T" summary "$i" --step-begin 1 --step-end 1
  one "$i.export" "$T" export "$i" "$OUT/$i.chrome.json" --force
  one "$i.report" "$T" report "$i" --html "$OUT/$i.report.html" --force
  one "$i.prepare" "$T" prepare "$i"
  one "$i.summary.prepared" "$T" summary "$i" --json
done
if [ -d cpu_sp2dp2 ]; then
  one export.rank1 "$T" export cpu_sp2dp2 "$OUT/cpu_sp2dp2.rank1.json" --rank 1 --force
  mkdir -p "$OUT/perrank" && one export.perrank "$T" export cpu_sp2dp2 "$OUT/perrank" --per-rank --force
  one compare.cpu "$T" compare cpu_sp2 cpu_sp2dp2
  one compare.cpu.json "$T" compare cpu_sp2 cpu_sp2dp2 --json
  one compare.sim "$T" compare cpu_sp2dp2 sim_sp4 --json
fi
[ -f h100_2gpu_1s.sqlite ] && one compare.nsys "$T" compare h100_2gpu_1s.sqlite mfu_2gpu_before.sqlite
cd "$OUT" || exit 1
for f in *.out *.err; do sed -i -E "s#$OUT#OUT#g; s#[0-9]+\.[0-9]+ s\b#T s#g" "$f"; done
echo "trace_outputs: $(find . -type f | wc -l) files in $OUT (compare two with diff -r)"
cd "$ROOT" && rm -rf "$W" "$W.cache"
