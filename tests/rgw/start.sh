#!/bin/bash
# start.sh — one-machine Ceph RADOS Gateway for the integration tests: a second,
# faithful S3 server (real SigV4 checks, paged CommonPrefixes, encoding-type=url,
# 412 on If-Match mismatch) next to s3rver.
#
# One monitor, one memstore OSD (RAM, nothing on disk), one radosgw; auth none, no
# manager. Everything on 127.0.0.1, ports 4710-4749 (mon 4710, daemons 4720-4739,
# S3 on 4740); state, logs and pid files under $FEEDFS_RGW_DIR (/tmp/feedfs-rgw).
# Installs its Debian packages when they are missing. If a gateway started by this
# script still answers, it is reused (a second run costs nothing).
#
# On success prints the S3 endpoint and writes $FEEDFS_RGW_DIR/env (sourceable:
# RGW_ENDPOINT, RGW_ACCESS_KEY, RGW_SECRET_KEY). Exit 0, or non-zero with the reason
# on the last line of stderr. Stop with tests/rgw/stop.sh. Concurrent runs are
# serialised (flock on $FEEDFS_RGW_DIR.lock).
set -euo pipefail

D=${FEEDFS_RGW_DIR:-/tmp/feedfs-rgw}
MON_PORT=4710
RGW_PORT=4740
ACCESS=FEEDFSRGWACCESS00001
SECRET=feedfsrgwsecret0000000000000000000000001
ENDPOINT=http://127.0.0.1:$RGW_PORT
T0=$SECONDS

say() { echo "[rgw $((SECONDS - T0))s] $*" >&2; }
die() { say "cannot start: $*"; exit 1; }
answers() { curl -s -o /dev/null --max-time 2 "$ENDPOINT/"; }

# One start at a time: tests/integration/run.sh starts the gateway in the
# background while the suite runs, and the first RGW test's own call must wait
# for that start, not tear it down and begin another. The daemons started
# below inherit fd 9, and a flock lives as long as any holder of its open
# file: so it is let go explicitly when this script ends, however it ends.
exec 9>"$D.lock"
flock 9
trap 'flock -u 9' EXIT

if [ -f "$D/env" ] && [ -f "$D/run/ceph-client.rgw.feedfs.pid" ] && answers; then
	say "already running at $ENDPOINT"
	cat "$D/env"
	exit 0
fi

missing=""
for b in radosgw ceph-mon ceph-osd ceph radosgw-admin monmaptool; do
	command -v "$b" >/dev/null || missing=1
done
if [ -n "$missing" ]; then
	[ "$(id -u)" = 0 ] || die "Ceph packages are missing and installing them needs root"
	say "installing radosgw ceph-mon ceph-osd ceph-common"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
		radosgw ceph-mon ceph-osd ceph-common >"/tmp/feedfs-rgw-apt.log" 2>&1 ||
		die "apt-get install failed (see /tmp/feedfs-rgw-apt.log)"
fi

"$(dirname "$0")/stop.sh" >/dev/null 2>&1 || true
rm -rf "$D"
mkdir -p "$D"/{mon,osd/ceph-0,run,log,rgw}
FSID=$(cat /proc/sys/kernel/random/uuid)
CONF=$D/ceph.conf
cat >"$CONF" <<CONF
[global]
fsid = $FSID
mon_host = [v2:127.0.0.1:$MON_PORT]
public_addr = 127.0.0.1
ms_bind_msgr1 = false
ms_bind_port_min = 4720
ms_bind_port_max = 4739
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
# radosgw asks for "secure" mode by default, which auth none cannot give
ms_mon_client_mode = crc secure
ms_client_mode = crc secure
run_dir = $D/run
admin_socket = $D/run/\$cluster-\$name.asok
pid_file = $D/run/\$cluster-\$name.pid
log_file = $D/log/\$cluster-\$name.log
mon_data = $D/mon/\$cluster-\$id
osd_data = $D/osd/\$cluster-\$id
osd_objectstore = memstore
memstore_device_bytes = 1610612736
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_crush_chooseleaf_type = 0
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_max_pg_per_osd = 1000
mon_data_avail_warn = 1
osd_memory_target = 939524096
[client.rgw.feedfs]
rgw_frontends = beast endpoint=127.0.0.1:$RGW_PORT
rgw_data = $D/rgw
rgw_thread_pool_size = 32
CONF
C=(-c "$CONF")

monmaptool --create --addv a "[v2:127.0.0.1:$MON_PORT]" --fsid "$FSID" "$D/monmap" >/dev/null
ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap" >>"$D/log/setup.log" 2>&1 || die "ceph-mon --mkfs failed"
ceph-mon "${C[@]}" -i a || die "ceph-mon did not start (see $D/log)"
timeout 60 ceph "${C[@]}" -s >/dev/null 2>&1 || die "the monitor does not answer"
say "monitor up"

OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
OSD_ID=$(timeout 60 ceph "${C[@]}" osd new "$OSD_UUID") || die "ceph osd new failed"
ceph-osd "${C[@]}" -i "$OSD_ID" --mkfs --osd-uuid "$OSD_UUID" >>"$D/log/setup.log" 2>&1 ||
	die "ceph-osd --mkfs failed (see $D/log/setup.log)"
ceph-osd "${C[@]}" -i "$OSD_ID" 2>>"$D/log/setup.log" || die "ceph-osd did not start"
for _ in $(seq 120); do
	ceph "${C[@]}" osd stat 2>/dev/null | grep -q "1 up" && break
	sleep 1
done
ceph "${C[@]}" osd stat 2>/dev/null | grep -q "1 up" || die "the OSD did not come up"
say "osd.$OSD_ID up (memstore)"

radosgw "${C[@]}" -n client.rgw.feedfs || die "radosgw did not start"
for _ in $(seq 180); do answers && break; sleep 1; done
answers || die "radosgw does not answer on $ENDPOINT (see $D/log)"
say "radosgw answers on $ENDPOINT"
radosgw-admin "${C[@]}" user create --uid=feedfs --display-name=feedfs \
	--access-key="$ACCESS" --secret="$SECRET" >>"$D/log/setup.log" 2>&1 ||
	die "radosgw-admin user create failed"
cat >"$D/env" <<ENV
RGW_ENDPOINT=$ENDPOINT
RGW_ACCESS_KEY=$ACCESS
RGW_SECRET_KEY=$SECRET
ENV
say "ready"
cat "$D/env"
