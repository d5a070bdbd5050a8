#!/bin/bash
# bench/run.sh — one command for the side-by-side benchmark (`make bench` calls it).
#
#   bench/run.sh                       full run (datasets created once, cached in build/bench/data)
#   QUICK=1 bench/run.sh               small smoke run (~5 min)
#   LATENCY_MS=20 bench/run.sh         workloads 1, 2, 5, 6, 7 behind a 20 ms first-byte proxy
#   FAULTS=1 bench/run.sh              the fault mode: bench/faults.py (issue 20)
#
# Knobs (env): QUICK, SIZE_SCALE, REPS, CONTENDERS=feedfs,s3fs,rclone, WORKLOADS=1,2,3,4,5,6,
# LATENCY_MS, BW_MBPS, PASS_TIMEOUT, RAND_SECONDS, MAX_MINUTES, PREPARE_ONLY, DIRECT_SEED,
# FEEDFS, S3RVER, NO_APT=1.
# See bench/README.md. Needs root (drop_caches, FUSE mounts, apt-get).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
PY=/usr/bin/python3
cd "$root"

say() { printf 'bench: %s\n' "$*"; }
die() { printf 'bench: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (drop_caches, mounts, apt-get)"
[ -e /dev/fuse ] || die "/dev/fuse is missing"

# --- dependencies (Debian packages; the bench installs its own peers) -------------------
need=()
command -v s3fs >/dev/null 2>&1 || need+=(s3fs)
command -v rclone >/dev/null 2>&1 || need+=(rclone)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
$PY -c 'import boto3' 2>/dev/null || need+=(python3-boto3)
$PY -c 'import matplotlib' 2>/dev/null || need+=(python3-matplotlib)
if [ ${#need[@]} -gt 0 ]; then
	[ "${NO_APT:-0}" = 1 ] && die "missing: ${need[*]} (NO_APT=1 set)"
	say "apt-get update && apt-get install -y ${need[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" </dev/null
fi

# --- the local S3 server: the project's pinned one, else a fallback --------------------
if [ -z "${S3RVER:-}" ]; then
	for c in "$root/tests/node_modules/.bin/s3rver" /tmp/s3t/node_modules/.bin/s3rver; do
		if [ -x "$c" ]; then S3RVER=$c; break; fi
	done
fi
if [ -z "${S3RVER:-}" ] && [ -x "$root/tests/deps.sh" ]; then
	say "s3rver missing: running tests/deps.sh --check-or-install"
	"$root/tests/deps.sh" --check-or-install
	[ -x "$root/tests/node_modules/.bin/s3rver" ] && S3RVER=$root/tests/node_modules/.bin/s3rver
fi
[ -n "${S3RVER:-}" ] || die "s3rver not found: run tests/deps.sh (or set S3RVER=path)"
export S3RVER

# feedfs: build it if the tree builds; the bench still runs the peers when it does not
if [ -z "${FEEDFS:-}" ]; then
	if make -s -C "$root" all >"$root/build/bench-make.log" 2>&1; then
		FEEDFS=$root/build/feedfs
	else
		say "warning: 'make all' failed (see build/bench-make.log); feedfs is benchmarked only if build/feedfs exists"
		FEEDFS=$root/build/feedfs
	fi
fi
export FEEDFS
# the FUSE passthrough ceiling (bench/fuse_ceiling.c); skipped when it does not build
make -s -C "$root" build/bench/fuse_ceiling >>"$root/build/bench-make.log" 2>&1 ||
	say "warning: build/bench/fuse_ceiling did not build: no FUSE passthrough ceiling this run"

# --- whatever happens, leave no mount and no server behind -------------------------------
cleanup() {
	local m
	if [ -d "$root/build/bench/mnt" ]; then
		while read -r m; do
			fusermount3 -u "$m" 2>/dev/null || fusermount -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
		done < <(awk -v p="$root/build/bench/mnt/" 'index($2, p) == 1 {print $2}' /proc/self/mounts)
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The fault mode (issue 20): the edge-case tree by path under ~10% faults,
# bench/faults.py; its own results file, no report regeneration.
case "${FAULTS:-}" in
""|0) ;;
*)
	out="$here/results/faults-$(date -u +%Y%m%dT%H%M%SZ)${LATENCY_MS:+-lat$LATENCY_MS}.json"
	say "fault mode: $PY bench/faults.py --files ${FAULT_FILES:-6105} --bin feedfs=$FEEDFS${LATENCY_MS:+ --latency-ms $LATENCY_MS} --out $out"
	$PY "$here/faults.py" --files "${FAULT_FILES:-6105}" --bin "feedfs=$FEEDFS" ${LATENCY_MS:+--latency-ms "$LATENCY_MS"} --out "$out"
	say "done: $out (see bench/results/faults.md for how to read it)"
	exit 0
	;;
esac

export BENCH_COMMAND="${BENCH_COMMAND:-$(env | grep -E '^(QUICK|SIZE_SCALE|REPS|CONTENDERS|WORKLOADS|LATENCY_MS|BW_MBPS|PASS_TIMEOUT|RAND_SECONDS|MAX_MINUTES)=.' | sort | tr '\n' ' ')make bench}"
say "command: $BENCH_COMMAND"
mkdir -p "$root/build/bench"
rm -f "$root/build/bench/last-result"
set +e
$PY "$here/bench.py" 2>&1 | tee "$root/build/bench/last-run.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || die "bench.py failed with $rc (see build/bench/last-run.log)"
case "${PREPARE_ONLY:-}" in ""|0) ;; *) say "datasets prepared"; exit 0 ;; esac
result=$(cat "$root/build/bench/last-result" 2>/dev/null || true)
[ -f "$result" ] || die "no result file (see build/bench/last-run.log)"
$PY "$here/report.py" "$result"
say "done: $result, BENCHMARKS.md, bench/charts/"
