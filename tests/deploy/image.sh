#!/bin/bash
# image.sh build IMAGE — helm/image/Dockerfile built with podman, offline from
# any registry: its FROM images (debian:bookworm, debian:bookworm-slim) are a
# Debian root made by mmdebstrap from this machine's apt sources
# (tests/deploy/rootfs.sh, cached in build/deploy/), imported under those names;
# the Dockerfile's own apt-get steps use the same apt sources (host network).
# image.sh podman ARGS... — podman with the settings these tests run it with.
#
# Settings, and why: cgroupfs and a file event log (PID 1 need not be
# systemd); runc (crun refuses a hybrid cgroup layout whose v2 side has a
# controller); rlimits no higher than ours (podman's defaults are above what a
# root without CAP_SYS_RESOURCE may set).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
base=$root/build/deploy/bookworm-apt.tar

nofile=$(ulimit -Hn); { [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ]; } && nofile=65536
nproc=$(ulimit -Hu); { [ "$nproc" = unlimited ] || [ "$nproc" -gt 8192 ]; } && nproc=8192
conf=$root/build/deploy/containers.conf
mkdir -p "$root/build/deploy"
cat >"$conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
CONF
export CONTAINERS_CONF=$conf

pod() { podman "$@"; }

case "${1:-}" in
podman)
	shift
	exec podman "$@"
	;;
build)
	image=${2:?usage: image.sh build IMAGE}
	"$here/rootfs.sh" apt "$base"
	# Re-import when the tarball is newer than the image made from it.
	stamp=$root/build/deploy/bookworm-apt.imported
	if [ ! -e "$stamp" ] || [ "$base" -nt "$stamp" ] ||
	   ! pod image exists docker.io/library/debian:bookworm-slim; then
		echo "image.sh: importing $base as debian:bookworm and debian:bookworm-slim"
		pod import -q "$base" docker.io/library/debian:bookworm >/dev/null
		pod tag docker.io/library/debian:bookworm docker.io/library/debian:bookworm-slim
		touch "$stamp"
	fi
	cd "$root"
	pod build --pull=never --network=host -f helm/image/Dockerfile -t "$image" .
	;;
*)
	echo "usage: image.sh build IMAGE | image.sh podman ARGS..." >&2
	exit 2
	;;
esac
