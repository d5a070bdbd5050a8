#!/bin/bash
# stop.sh — stop the daemons tests/rgw/start.sh started (by their pid files only)
# and remove the state (memstore: the data lived in RAM anyway).
D=${FEEDFS_RGW_DIR:-/tmp/feedfs-rgw}
for n in client.rgw.feedfs osd.0 mon.a; do
	f=$D/run/ceph-$n.pid
	[ -f "$f" ] || continue
	p=$(cat "$f")
	kill "$p" 2>/dev/null && echo "stopped $n ($p)"
	for _ in $(seq 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done
	kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
done
[ "${1:-}" = "--keep" ] || rm -rf "$D"
exit 0
