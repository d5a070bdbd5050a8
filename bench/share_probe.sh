#!/bin/bash
# bench/share_probe.sh [ROUNDS] — two mounts on one cache dir (docs/CACHE.md
# "Sharing"), over the s3rver and 2 GiB object that `make bench` prepared
# (build/bench/data). Each round, page cache dropped before every read:
#   owner cold       fresh cache dir, the owner reads the object (S3 -> cache)
#   attached cold    fresh cache dir, the attached mount reads it (the owner fetches)
#   owner disk       the owner reads it again (from its disk cache)
#   attached disk    the attached mount reads it (through the owner's disk cache)
# dd bs=1M, MB/s as dd prints it. Timing only; not a test (test_share.py checks
# the bytes). Needs root (drop_caches, mounts). FEEDFS=path picks the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${FEEDFS:-$PWD/build/feedfs}
ROUNDS=${1:-3}
DATA=build/bench/data/s3rver
[ -d "$DATA" ] || { echo "run make bench first (no $DATA)" >&2; exit 2; }
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
NODE_OPTIONS=--openssl-legacy-provider tests/node_modules/.bin/s3rver -d "$DATA" \
	-a 127.0.0.1 -p "$PORT" --silent &
SRV=$!
W=build/bench/share; C=$W/cache; A=$W/owner; B=$W/attached
mkdir -p "$A" "$B"
cleanup() { fusermount3 -u "$A" 2>/dev/null || true; fusermount3 -u "$B" 2>/dev/null || true
	    kill $SRV 2>/dev/null || true; rm -rf "$C"; }
trap cleanup EXIT
sleep 3
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_EC2_METADATA_DISABLED=true \
       ALIBABA_CLOUD_ECS_METADATA_DISABLED=true
up() { "$BIN" s3://large-2048m "$1" --endpoint-url "http://127.0.0.1:$PORT" --force-path-style \
	--region us-east-1 --cache-dir "$C" --cache-size 3G --log-file "$W/$(basename "$1").log"; }
down() { fusermount3 -u "$A"; fusermount3 -u "$B"; sleep 1; }
rd() { sync; echo 3 > /proc/sys/vm/drop_caches
       printf '  %-15s %s\n' "$2" "$(dd if="$1/big.bin" of=/dev/null bs=1M 2>&1 | tail -1 |
				    awk '{print $(NF-1), $NF}')"; }
for r in $(seq "$ROUNDS"); do
	echo "round $r ($BIN)"
	rm -rf "$C"; up "$A"; up "$B"; rd "$A" "owner cold"; down
	rm -rf "$C"; up "$A"; up "$B"; rd "$B" "attached cold"; rd "$A" "owner disk"
	rd "$B" "attached disk"; down
done
grep -h "reads through the owner" "$W/attached.log" | tail -1 | cut -d' ' -f2-
