#!/bin/bash
# demo.sh BIN — a local S3 server, a sample dataset, a feedfs mount and a
# training-style read pass; leaves nothing running.
#
# The dataset (3,000 images of 20-200 KiB in 20 class folders + one 512 MiB shard)
# is deterministic and cached in build/demo/s3rver-data between runs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
PY=/usr/bin/python3
DATASET_VERSION=1

[ $# -eq 1 ] || { echo "usage: $0 path/to/feedfs" >&2; exit 2; }
bin=$(readlink -f "$1")
[ -x "$bin" ] || { echo "demo: $1 is not an executable (run make first)" >&2; exit 2; }
s3rver=$here/node_modules/.bin/s3rver
[ -x "$s3rver" ] || { echo "demo: $s3rver missing (run tests/deps.sh)" >&2; exit 2; }

work=$root/build/demo
data=$work/s3rver-data
mnt=$work/mnt
manifest=$work/manifest.json
stamp=$work/dataset-v$DATASET_VERSION.done
mkdir -p "$work" "$data" "$mnt"

step() { printf '\n==> %s\n' "$*"; }

server_pid=
cleanup() {
	local rc=$?
	if mountpoint -q "$mnt" 2>/dev/null; then
		echo "demo: unmounting $mnt"
		fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true
	fi
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		kill "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if mountpoint -q "$mnt" 2>/dev/null; then
	echo "demo: $mnt is still mounted from an earlier run; unmounting it"
	fusermount3 -u "$mnt" || fusermount3 -uz "$mnt"
fi

port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
endpoint=http://127.0.0.1:$port
node_major=$(node -p 'process.versions.node.split(".")[0]')
node_opts=${NODE_OPTIONS:-}
[ "$node_major" -ge 17 ] && node_opts="$node_opts --openssl-legacy-provider"

step "1/5 starting s3rver on $endpoint (data in $data)"
NODE_OPTIONS=$node_opts "$s3rver" -d "$data" -a 127.0.0.1 -p "$port" --silent \
	>"$work/s3rver.log" 2>&1 </dev/null &
server_pid=$!
for _ in $(seq 1 300); do
	curl -s -o /dev/null "$endpoint/" && break
	kill -0 "$server_pid" 2>/dev/null || { echo "demo: s3rver died:"; cat "$work/s3rver.log"; exit 1; }
	sleep 0.1
done
curl -s -o /dev/null "$endpoint/" || { echo "demo: s3rver does not answer"; exit 1; }

if [ -f "$stamp" ] && [ -f "$manifest" ]; then
	step "2/5 dataset: cached ($(wc -l <"$manifest") manifest lines; rm -rf build/demo to rebuild)"
else
	step "2/5 generating the dataset into s3://demo (first run only)"
	"$PY" "$here/demo/make_dataset.py" --endpoint "$endpoint" --bucket demo --manifest "$manifest"
	touch "$stamp"
fi

step "3/5 mounting s3://demo on $mnt"
AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER \
	"$bin" s3://demo "$mnt" --endpoint-url "$endpoint" --force-path-style --region us-east-1 \
	--log-file "$work/feedfs.log"
echo "    mounted: $(grep " $mnt " /proc/mounts | cut -d' ' -f1-3)"

step "4/5 training-style read pass (os.walk + 8 reader threads, then the shard)"
"$PY" "$here/demo/train_reader.py" "$mnt" "$manifest" --threads 8

if "$PY" -c 'import torch' 2>/dev/null; then
	step "4b/5 docs/PYTHON.md's PyTorch example: FolderDataset + OrderedSampler, 2 epochs"
	code=$("$PY" "$here/demo/doc_example.py" pytorch)
	PYTHONPATH="$root/python" "$PY" -c "$code" "$mnt/train"
else
	step "4b/5 skipped: torch is not installed (Debian: python3-torch)"
fi

step "5/5 unmounting and stopping s3rver"
fusermount3 -u "$mnt"
for _ in $(seq 1 100); do pgrep -f "^$bin s3://demo $mnt" >/dev/null || break; sleep 0.1; done
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true
server_pid=
echo "demo: done (feedfs log: $work/feedfs.log)"
