#!/bin/bash
# stress.sh — the integration passes again and again under CPU load, to find
# the races that a quiet machine hides (`make test-stress`).
#
#   tests/stress.sh FEEDFS_BIN        ROUNDS (default 3), HOGS (default 2)
#
# Each round runs tests/integration/run.sh as `make test` does (plain, then
# the ASan/UBSan, TSan and valgrind passes, with the builds `make test-stress`
# made) while HOGS shell busy loops compete for the CPUs. Prints each round's
# time and result; exits 1 at the first round that fails (its output above).
set -u
bin=${1:?usage: stress.sh FEEDFS_BIN}
rounds=${ROUNDS:-3}
hogs=${HOGS:-2}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1

pids=()
stop_hogs() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; }
trap stop_hogs EXIT
for _ in $(seq 1 "$hogs"); do
	( while :; do :; done ) &
	pids+=($!)
done
echo "stress: $rounds rounds, $hogs CPU hogs beside them, $(nproc) CPUs"
for r in $(seq 1 "$rounds"); do
	t0=$SECONDS
	FEEDFS_SAN_BIN=build/san-address-undefined/feedfs FEEDFS_TSAN_BIN=build/san-thread/feedfs \
	FEEDFS_VALGRIND=1 tests/integration/run.sh "$bin"
	rc=$?
	echo "stress: round $r/$rounds: exit $rc after $((SECONDS - t0)) s"
	[ $rc -eq 0 ] || exit 1
done
echo "stress: all $rounds rounds passed"
