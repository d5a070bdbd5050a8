#!/bin/bash
# run.sh BIN — the integration tests: real FUSE mounts of BIN over a local S3 server.
#
# Runs the whole suite with FEEDFS_BIN=BIN. When FEEDFS_SAN_BIN names an executable
# (the ASan/UBSan build), runs the tests marked `san` again with it; any sanitizer
# report fails the run. Exit status is non-zero on any failure, including "no tests ran".
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
	if [ $rc -eq 5 ]; then
		echo "run.sh: no tests were collected ($what): that is a failure" >&2
		return 1
	fi
	return $rc
}

status=0
FEEDFS_BIN=$bin run_pytest "feedfs $bin" tests/integration || status=1

san=${FEEDFS_SAN_BIN:-}
if [ -n "$san" ]; then
	if [ ! -x "$san" ]; then
		echo "run.sh: FEEDFS_SAN_BIN=$san is not an executable" >&2
		status=1
	else
		san=$(readlink -f "$san")
		logdir=$(mktemp -d /tmp/feedfs-san.XXXXXX)
		export FEEDFS_SAN_LOG_DIR=$logdir
		export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:log_path=$logdir/asan"
		export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logdir/ubsan"
		export LSAN_OPTIONS="log_path=$logdir/lsan"
		FEEDFS_BIN=$san run_pytest "sanitizers $san" -m san tests/integration || status=1
		reports=$(find "$logdir" -type f -size +0 2>/dev/null)
		if [ -n "$reports" ]; then
			echo "run.sh: sanitizer reports:" >&2
			for r in $reports; do echo "--- $r" >&2; head -c 20000 "$r" >&2; done
			status=1
		fi
		rm -rf "$logdir"
	fi
fi

[ $status -eq 0 ] && echo "== integration: all passed" || echo "== integration: FAILED" >&2
exit $status
