#!/bin/bash
# Two "machines" = two network namespaces joined by a veth pair. Rank 0 runs in
# namespace A (10.213.0.1), rank 1 in B (10.213.0.2) with MASTER_ADDR = A's address and
# GLOO_SOCKET_IFNAME = its veth end, so every byte between the ranks crosses the veth
# link. Losses must equal ulysses-run's on one machine (1e-6 relative).
# With a fourth argument `no-ifname` the ranks get no GLOO_SOCKET_IFNAME: Gloo must bind the
# interface that reaches MASTER_ADDR by itself, rank 0's store 10.213.0.1 alone, and both say so.
# Needs root and `ip netns`; otherwise exit 77 (skipped) saying why.
#   check_netns.sh RUN_BIN WORKER_BIN SRC_DIR [no-ifname]
set -euo pipefail
run=$1 worker=$2 src=$3 mode=${4:-}
[ "$(id -u)" = 0 ] || { echo "SKIP: network namespaces need root"; exit 77; }
command -v ip > /dev/null || { echo "SKIP: no ip command (iproute2)"; exit 77; }
tag=u$$
a=${tag}a b=${tag}b
tmp=$(mktemp -d)
cleanup() {
  ip netns del "$a" 2> /dev/null || true
  ip netns del "$b" 2> /dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
if ! ip netns add "$a" 2> "$tmp/err"; then echo "SKIP: ip netns add failed: $(cat "$tmp/err")"; exit 77; fi
ip netns add "$b"
ip link add "${tag}va" type veth peer name "${tag}vb"
ip link set "${tag}va" netns "$a"
ip link set "${tag}vb" netns "$b"
ip -n "$a" addr add 10.213.0.1/24 dev "${tag}va"
ip -n "$b" addr add 10.213.0.2/24 dev "${tag}vb"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "${tag}va" up
ip -n "$b" link set "${tag}vb" up

cd "$src"
"$run" resources/configs/tiny.json --set parallel.sp_size=2 --set train.steps=3 --set train.seq_length=64 \
  --set profile.enabled=false --set train.threads_per_rank=1 --json --out "$tmp/ref" > "$tmp/ref.jsonl"
cfg=$tmp/ref/config.json
common=(WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.213.0.1 MASTER_PORT=29613)
ifa=(GLOO_SOCKET_IFNAME="${tag}va") ifb=(GLOO_SOCKET_IFNAME="${tag}vb")
if [ "$mode" = no-ifname ]; then ifa=(-u GLOO_SOCKET_IFNAME) ifb=(-u GLOO_SOCKET_IFNAME); fi
ip netns exec "$a" env "${ifa[@]}" "${common[@]}" RANK=0 "$worker" --config "$cfg" --out "$tmp/a" > "$tmp/a.log" 2>&1 &
pa=$!
ip netns exec "$b" env "${ifb[@]}" "${common[@]}" RANK=1 "$worker" --config "$cfg" --out "$tmp/b" > "$tmp/b.log" 2>&1 &
pb=$!
rc=0
wait $pa || rc=$?
wait $pb || rc=$?
if [ $rc != 0 ]; then cat "$tmp/a.log" "$tmp/b.log"; exit 1; fi
if [ "$mode" = no-ifname ]; then
  for want in "a.log:rank 0's store listens on 10.213.0.1:29613 only" \
    "a.log:rank 0: Gloo listens on 10.213.0.1, the address of the interface that reaches MASTER_ADDR" \
    "b.log:rank 1: Gloo listens on 10.213.0.2, the address of the interface that reaches MASTER_ADDR"; do
    grep -qF "${want#*:}" "$tmp/${want%%:*}" || { echo "not said in ${want%%:*}: ${want#*:}"; cat "$tmp/a.log" "$tmp/b.log"; exit 1; }
  done
fi
python3 - "$tmp/ref.jsonl" "$tmp/a/metrics.jsonl" <<'PY'
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
got = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
assert len(ref) == 3 and len(got) == 3, (len(ref), len(got))
for x, y in zip(ref, got):
    assert abs(x["loss"] - y["loss"]) <= 1e-6 * abs(x["loss"]), (x["step"], x["loss"], y["loss"])
print("two namespaces over veth: losses", [round(g["loss"], 6) for g in got], "= ulysses-run")
PY
