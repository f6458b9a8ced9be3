#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan) and runs each one for a
# bounded time on a copy of its seed corpus (fuzz/corpus/TARGET). CI runs 10 s per target in
# the ci-asan build (CTest: Fuzz.<target>, from `./ulysses sanitize asan`); longer by hand:
#   fuzz/run_fuzz.sh 600                 # 10 minutes per target
#   fuzz/run_fuzz.sh 3600 build-fuzz config trace_loader   # only these targets
# A finding stops the run with exit 1 and leaves the input in BUILD/artifacts/ (replay it:
# BUILD/fuzz_TARGET BUILD/artifacts/crash-...). Exit 77 (CTest: skipped) without clang or
# the fuzzer runtime (Debian: clang libclang-rt-dev).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SECONDS_PER_TARGET="${1:-20}"
BUILD="${2:-$HERE/../build-fuzz}"
shift $(( $# > 2 ? 2 : $# )) || true
TARGETS=("$@")
# Default: every target fuzz/targets.cmake defines (its ULYSSES_FUZZ_TARGET_NAMES, the one list).
((${#TARGETS[@]})) || read -r -a TARGETS <<<"$(sed -n 's/^set(ULYSSES_FUZZ_TARGET_NAMES \(.*\))$/\1/p' "$HERE/targets.cmake")"
((${#TARGETS[@]})) || { echo "run_fuzz.sh: no target names in $HERE/targets.cmake" >&2; exit 1; }
if [ "${ULYSSES_FUZZ_PREBUILT:-0}" != 1 ]; then
  CXX="${ULYSSES_FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}"
  if [ -z "$CXX" ]; then echo "run_fuzz.sh: no clang++ (install clang libclang-rt-dev); skipped" >&2; exit 77; fi
  if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
       "$CXX" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
    echo "run_fuzz.sh: $CXX has no libFuzzer runtime (install libclang-rt-dev); skipped" >&2; exit 77
  fi
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$HERE" -B "$BUILD" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
  cmake --build "$BUILD" -j "${ULYSSES_JOBS:-2}" -- -s >/dev/null
else
  # ULYSSES_FUZZ_PREBUILT=1: BUILD already holds fuzz_TARGET (the ci-asan preset's CTest tests)
  for t in "${TARGETS[@]}"; do
    [ -x "$BUILD/fuzz_$t" ] || { echo "run_fuzz.sh: $BUILD/fuzz_$t is not built" >&2; exit 1; }
  done
fi
mkdir -p "$BUILD/artifacts"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export TMPDIR="$BUILD"
status=0
for t in "${TARGETS[@]}"; do
  work="$BUILD/corpus/$t"   # grows with what the fuzzer finds; the repo's seeds stay as they are
  mkdir -p "$work"
  echo "== fuzz_$t: ${SECONDS_PER_TARGET} s (seeds: fuzz/corpus/$t)"
  if ! "$BUILD/fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -artifact_prefix="$BUILD/artifacts/$t-" -print_final_stats=1 "$work" "$HERE/corpus/$t" 2>"$BUILD/fuzz_$t.log"; then
    echo "fuzz_$t: FINDING (see $BUILD/fuzz_$t.log and $BUILD/artifacts/)" >&2
    tail -40 "$BUILD/fuzz_$t.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$BUILD/fuzz_$t.log" | tail -2
  fi
done
exit $status
