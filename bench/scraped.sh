#!/bin/bash
# bench/scraped.sh PORT FEEDFS ARGS... — run feedfs (in the foreground, -f among
# ARGS) with --metrics-addr 127.0.0.1:PORT and GET /metrics once a second for as
# long as it runs, as a Prometheus server would. The bench's feedfs-scraped
# contender: what scraping costs the read path, side by side with plain feedfs.
set -u
port=$1; shift
bin=$1; shift
"$bin" "$@" --metrics-addr "127.0.0.1:$port" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null' TERM INT
n=0
while kill -0 "$pid" 2>/dev/null; do
	if curl -sf -o /dev/null "http://127.0.0.1:$port/metrics"; then
		n=$((n + 1))
	fi
	sleep 1
done
wait "$pid"
rc=$?
echo "scraped.sh: $n scrapes of :$port/metrics, feedfs exited $rc" >&2
exit $rc
