#!/bin/bash
# bench/scraped.sh PORT FEEDFS ARGS... — run feedfs (in the foreground, -f among
# ARGS) with --metrics-addr 127.0.0.1:PORT and GET /metrics once a second for as
# long as it runs, as a Prometheus server would. The bench's feedfs-scraped
# contender: what scraping costs the read path, side by side with plain feedfs.
# feedfs replaces this shell (exec), so the bench samples feedfs's own RSS and
# signals reach it directly; the scraper loop ends when that pid is gone.
set -u
port=$1; shift
bin=$1; shift
me=$$
(
	n=0
	sleep 1
	while kill -0 "$me" 2>/dev/null; do
		curl -sf -o /dev/null "http://127.0.0.1:$port/metrics" && n=$((n + 1))
		sleep 1
	done
	echo "scraped.sh: $n scrapes of :$port/metrics" >&2
) &
exec "$bin" "$@" --metrics-addr "127.0.0.1:$port"
