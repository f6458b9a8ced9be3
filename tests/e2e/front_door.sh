#!/usr/bin/env bash
# The README's front door: ./ulysses run / trace / studio find the programs in the build
# directory and work end to end (a 2-step run, its summary and a Chrome export).
set -euo pipefail
src="$1"; build="$2"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
export ULYSSES_BUILD_DIR="$build"
cd "$src"
./ulysses run resources/configs/tiny.json --set train.steps=2 --set train.seq_length=64 --json --out "$out/run" > "$out/metrics"
test "$(wc -l < "$out/metrics")" -eq 2
# Into a file first: with pipefail, `| grep -q` can fail the pipeline when grep exits on
# the first match and the summary's next write meets a closed pipe (SIGPIPE).
./ulysses trace summary "$out/run" > "$out/summary"
grep -q "tokens/s" "$out/summary"
./ulysses trace export --format chrome "$out/run" "$out/trace.json"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['traceEvents'], 'no events'" "$out/trace.json"
if [ -x "$build/app/studio/ulysses-studio" ]; then
  QT_QPA_PLATFORM=offscreen ./ulysses studio "$out/run" --view report --screenshot "$out/shot.png"
  test -s "$out/shot.png"
fi
set +e
./ulysses run resources/configs/tiny.json --set parallel.sp_size=3 --out "$out/bad" 2> "$out/err"
code=$?
set -e
test "$code" -eq 2
grep -q "divisible by parallel.sp_size (3)" "$out/err"
echo "front door OK"
