#!/usr/bin/env bash
# The Debian 13 lane: this checkout built and tested on Debian 13 (trixie: libtorch 2.6, Qt 6.8,
# clang 19) inside a root made with debootstrap, which is kept between runs. CI runs it after
# the Debian 12 lane (.ci/run); a developer runs it the same way.
#
#   tools/debian13-lane.sh test [ctest args]   ./ulysses test in the root (build folder build-debian13/)
#   tools/debian13-lane.sh demo                ./ulysses demo in the root
#   tools/debian13-lane.sh run "CMD..."        a bash command line in the root, in this checkout
#   tools/debian13-lane.sh root                only make (or check) the root
#
# The root lives in $ULYSSES_DEBIAN13_ROOT (default /var/cache/ulysses/debian13-root). It is
# made once with `debootstrap --variant=minbase trixie` from the mirror the machine's own apt
# uses; ./ulysses installs the packages inside it as on any Debian 13 machine. Each command
# runs in a private mount namespace (proc, sys, a private /dev, the checkout's parent folder
# bound at the same path so that ../shared is where the tests look, and the CUDA toolkit when
# the machine has one, for the CUDA-branch compile check), so nothing stays mounted after it.
# Needs root (debootstrap, chroot, mounts). Exit: the command's own status; 2 on bad usage.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOTFS="${ULYSSES_DEBIAN13_ROOT:-/var/cache/ulysses/debian13-root}"
SUITE=trixie
say() { printf '\033[1m==> [debian13] %s\033[0m\n' "$*" >&2; }
die() { echo "debian13-lane: $*" >&2; exit "${2:-1}"; }

usage() { sed -n '4,8p' "$0" | sed 's/^# \{0,1\}//'; }
cmd="${1:-}"
case "$cmd" in
  test | demo | run | root) shift ;;
  -h | --help | help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
[ "$cmd" != run ] || [ $# -gt 0 ] || die "run needs a command" 2
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and mounts); run it with sudo" 2
command -v unshare >/dev/null || die "unshare not found (util-linux)"

# The mirror the machine's apt already uses (deb822 or one-line sources), else Debian's own.
mirror() {
  local m=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    m="$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)"
  fi
  if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
    m="$(awk '$1 == "deb" && $2 !~ /security/ { print ($2 ~ /^\[/ ? $3 : $2); exit }' /etc/apt/sources.list)"
  fi
  echo "${m:-http://deb.debian.org/debian}"
}

make_root() {
  if [ -f "$ROOTFS/.ulysses-root-ready" ]; then return; fi
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
  }
  local m tmp
  m="$(mirror)"
  tmp="$ROOTFS.partial"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$ROOTFS")"
  say "making a Debian 13 root in $ROOTFS (debootstrap --variant=minbase $SUITE $m; a few minutes, once)"
  debootstrap --variant=minbase "$SUITE" "$tmp" "$m" >"$tmp.log" 2>&1 || {
    tail -n 20 "$tmp.log" >&2
    die "debootstrap failed (log: $tmp.log)"
  }
  rm -f "$tmp.log"
  # The security suite too, as an installed machine has it.
  printf 'deb %s %s main\ndeb %s %s-updates main\n' "$m" "$SUITE" "$m" "$SUITE" >"$tmp/etc/apt/sources.list"
  rm -rf "$ROOTFS"
  mv "$tmp" "$ROOTFS"
  touch "$ROOTFS/.ulysses-root-ready"
}

# Runs "$@" (a bash command line) in the root, in the checkout, in a private mount namespace.
in_root() {
  local work cuda=""
  work="$(dirname "$REPO")"
  [ -d /usr/local/cuda/include ] && cuda="$(readlink -f /usr/local/cuda)"
  # As an installer does: the machine's name resolves (torchrun's default MASTER_ADDR).
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$(hostname)" \
    >"$ROOTFS/etc/hosts"
  cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf" 2>/dev/null || true
  # shellcheck disable=SC2016
  ROOTFS="$ROOTFS" WORK="$work" CUDA="$cuda" REPO="$REPO" CMDLINE="$CMDLINE" unshare --mount --propagation private -- bash -c '
    set -euo pipefail
    R="$ROOTFS"
    mount -t proc proc "$R/proc"
    mount -t sysfs sys "$R/sys"
    mount -t tmpfs -o mode=755,size=64m tmpfs "$R/dev"
    for n in "null 1 3" "zero 1 5" "full 1 7" "random 1 8" "urandom 1 9" "tty 5 0"; do
      set -- $n; mknod -m 666 "$R/dev/$1" c "$2" "$3"
    done
    mkdir -p "$R/dev/pts" "$R/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666 devpts "$R/dev/pts"
    ln -s pts/ptmx "$R/dev/ptmx"
    mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm"
    ln -s /proc/self/fd "$R/dev/fd"
    mkdir -p "$R/tmp" && chmod 1777 "$R/tmp"
    mkdir -p "$R$WORK" && mount --rbind "$WORK" "$R$WORK"
    if [ -n "$CUDA" ]; then
      mkdir -p "$R$CUDA" && mount --bind -o ro "$CUDA" "$R$CUDA"
      [ "$CUDA" = /usr/local/cuda ] || ln -sfn "$CUDA" "$R/usr/local/cuda"
    fi
    exec chroot "$R" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      LANG=C.UTF-8 TERM="${TERM:-dumb}" CI="${CI:-}" QT_QPA_PLATFORM=offscreen \
      ULYSSES_WERROR="${ULYSSES_WERROR:-OFF}" ULYSSES_JOBS="${ULYSSES_JOBS:-}" \
      ULYSSES_BUILD_DIR="$REPO/build-debian13" \
      bash -c "cd \"\$0\" && $CMDLINE" "$REPO"
  '
}

make_root
# The arguments quoted for the command line ("" when there are none: printf '%q ' with no
# argument prints '' , an empty argument).
args=""
[ $# -eq 0 ] || args="$(printf '%q ' "$@")"
case "$cmd" in
  root) say "root ready: $ROOTFS ($(chroot "$ROOTFS" cat /etc/debian_version))" ;;
  test)
    say "./ulysses test on Debian $(cat "$ROOTFS/etc/debian_version") (build folder build-debian13/)"
    CMDLINE="./ulysses test $args" in_root
    ;;
  demo) CMDLINE="./ulysses demo $args" in_root ;;
  run) CMDLINE="$*" in_root ;;
esac
