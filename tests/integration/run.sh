#!/bin/bash
# run.sh BIN — the integration tests: real FUSE mounts of BIN over a local S3 server.
#
# Runs the whole suite with FEEDFS_BIN=BIN, then, each when asked:
#   FEEDFS_SAN_BIN=B    the tests marked `san` with B, the ASan/UBSan build
#   FEEDFS_TSAN_BIN=B   the tests marked `tsan` with B, the ThreadSanitizer build
#   FEEDFS_VALGRIND=1   the tests marked `vg` with BIN under valgrind memcheck
# Any report of those tools fails the run. Exit status is non-zero on any
# failure, including "no tests ran".
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
PY=/usr/bin/python3

[ $# -eq 1 ] || { echo "usage: $0 path/to/feedfs" >&2; exit 2; }
bin=$(readlink -f "$1")
[ -x "$bin" ] || { echo "run.sh: $1 is not an executable" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "run.sh: /dev/fuse is missing" >&2; exit 2; }

# pytest exit codes: 0 ok, 1 failures, 2 interrupted, 3 internal, 4 usage, 5 no tests
run_pytest() {
	local what=$1; shift
	echo "== integration ($what): $PY -m pytest -q $*"
	local t0=$SECONDS rc
	(cd "$root" && "$PY" -m pytest -q "$@")
	rc=$?
	echo "== integration ($what): exit $rc after $((SECONDS - t0))s"
	if [ $rc -eq 5 ] && [ -z "${ALLOW_EMPTY:-}" ]; then
		echo "run.sh: no tests were collected ($what): that is a failure" >&2
		return 1
	fi
	return $rc
}

# The Ceph gateway (tests/rgw/start.sh, about a minute to start) comes up in
# the background while the first tests run, and is kept for every pass
# (FEEDFS_RGW_KEEP: the passes find it and its buckets there) and stopped at
# the end. The RGW tests' own call of start.sh waits for this one (flock).
rgw_log=$(mktemp /tmp/feedfs-rgw-start.XXXXXX)
"$root/tests/rgw/start.sh" >"$rgw_log" 2>&1 &
export FEEDFS_RGW_KEEP=1
cleanup() {
	rm -rf "${FEEDFS_SAN_LOG_DIR:-/nonexistent}"
	wait
	"$root/tests/rgw/stop.sh" >/dev/null 2>&1
	rm -f "$rgw_log"
}
trap cleanup EXIT

# The test files run on two workers (pytest-xdist, one file per worker at a
# time, each worker with its own s3rver): most tests wait on mounts, stalls
# and timers, not on the CPU. The files that drop the kernel's caches
# (drop_caches is global: it would take dentries and pages from a test on the
# other worker that counts its requests) run afterwards, one test at a time.
# FEEDFS_TEST_JOBS=1, or no xdist, runs everything one test at a time.
serial_files=(test_cache.py test_faults.py test_forget.py test_passthrough.py test_retry_hedge.py test_share.py)
jobs=${FEEDFS_TEST_JOBS:-2}
par=()
if [ "$jobs" -gt 1 ] && "$PY" -c 'import xdist' 2>/dev/null; then
	par=(-n "$jobs" --dist loadfile)
fi

# run_split WHAT [pytest args]: the suite, split as above.
run_split() {
	local what=$1 rc=0 f; shift
	if [ ${#par[@]} -eq 0 ]; then
		run_pytest "$what" "$@" tests/integration
		return
	fi
	local ign=() ser=()
	for f in "${serial_files[@]}"; do
		ign+=(--ignore="tests/integration/$f")
		ser+=("tests/integration/$f")
	done
	# Either part may select nothing (a marker the serial files lack); not both.
	local a b
	ALLOW_EMPTY=1 run_pytest "$what, parallel" "${par[@]}" "$@" "${ign[@]}" tests/integration
	a=$?
	ALLOW_EMPTY=1 run_pytest "$what, one at a time" "$@" "${ser[@]}"
	b=$?
	if [ $a -eq 5 ] && [ $b -eq 5 ]; then
		echo "run.sh: no tests were collected ($what): that is a failure" >&2
		return 1
	fi
	{ [ $a -eq 0 ] || [ $a -eq 5 ]; } && { [ $b -eq 0 ] || [ $b -eq 5 ]; }
}

status=0
FEEDFS_BIN=$bin run_split "feedfs $bin" || status=1

# extra_pass NAME MARKER BIN: the tests marked MARKER again, with BIN. Every
# report file the tool leaves in $FEEDFS_SAN_LOG_DIR fails the pass (conftest
# also fails the test that caused it). The caller exports the tool's options.
extra_pass() {
	local name=$1 marker=$2 b=$3 reports rc=0
	if [ ! -x "$b" ]; then
		echo "run.sh: $name binary $b is not an executable" >&2
		return 1
	fi
	FEEDFS_BIN=$(readlink -f "$b") run_split "$name $b" -m "$marker" || rc=1
	# A test's daemons report into a directory named for it (mounter.py), so
	# the test failed already; a report at the top was written by a process
	# no test owns (a daemon started by hand): it fails the pass, by pid.
	reports=$(find "$FEEDFS_SAN_LOG_DIR" -type f -size +0 2>/dev/null)
	if [ -n "$reports" ]; then
		echo "run.sh: $name reports:" >&2
		for r in $reports; do
			if [ "$(dirname "$r")" = "$FEEDFS_SAN_LOG_DIR" ]; then
				echo "--- $(basename "$r") (pid ${r##*.}, owned by no test)" >&2
			else
				echo "--- $(basename "$r") (pid ${r##*.}) of $(basename "$(dirname "$r")")" >&2
			fi
			head -c 20000 "$r" >&2
		done
		rc=1
	fi
	return $rc
}

new_logdir() {
	rm -rf "${FEEDFS_SAN_LOG_DIR:-/nonexistent}"
	FEEDFS_SAN_LOG_DIR=$(mktemp -d /tmp/feedfs-san.XXXXXX)
	export FEEDFS_SAN_LOG_DIR
}

# ASan + UBSan: the `san` tests
if [ -n "${FEEDFS_SAN_BIN:-}" ]; then
	new_logdir
	(
		export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:log_path=$FEEDFS_SAN_LOG_DIR/asan"
		export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$FEEDFS_SAN_LOG_DIR/ubsan"
		export LSAN_OPTIONS="log_path=$FEEDFS_SAN_LOG_DIR/lsan"
		extra_pass sanitizers san "$FEEDFS_SAN_BIN"
	) || status=1
fi

# ThreadSanitizer: the `tsan` tests (concurrent readers of one daemon)
if [ -n "${FEEDFS_TSAN_BIN:-}" ]; then
	new_logdir
	(
		export TSAN_OPTIONS="second_deadlock_stack=1:log_path=$FEEDFS_SAN_LOG_DIR/tsan"
		extra_pass tsan tsan "$FEEDFS_TSAN_BIN"
	) || status=1
fi

# valgrind memcheck of the plain binary: the `vg` tests. No error, no definite
# leak; -q keeps the log of a clean daemon empty.
if [ "${FEEDFS_VALGRIND:-0}" = 1 ]; then
	command -v valgrind >/dev/null 2>&1 || { echo "run.sh: valgrind is not installed" >&2; exit 1; }
	new_logdir
	(
		export FEEDFS_WRAP="valgrind -q --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite --log-file=$FEEDFS_SAN_LOG_DIR/valgrind.%p"
		extra_pass valgrind vg "$bin"
	) || status=1
fi

[ $status -eq 0 ] && echo "== integration: all passed" || echo "== integration: FAILED" >&2
exit $status
