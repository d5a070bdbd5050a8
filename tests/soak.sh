#!/bin/bash
# soak.sh — SOAK_MINUTES (default 10) of 32 readers over a mixed dataset through
# fault_proxy (faults on, rotating kinds), one mount. Zero wrong bytes allowed;
# daemon RSS sampled every second and reported (first/last minute, peak).
# Not part of CI: `make soak`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export FEEDFS_BIN=${FEEDFS_BIN:-$root/build/feedfs} SOAK_MINUTES=${SOAK_MINUTES:-10}
export FEEDFS_SOAK=1
# The tests' hang watchdog (mounter.py, 240 s) would kill the soak's daemon.
export FEEDFS_TEST_DEADLINE_S=$((SOAK_MINUTES * 60 + 300))
cd "$root"
exec /usr/bin/python3 -m pytest -q -s -p no:cacheprovider tests/integration/soak_faults.py
