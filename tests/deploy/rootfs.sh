#!/bin/bash
# rootfs.sh KIND OUT.tar — a Debian 12 root for the deployment tests (make test-deploy),
# built with mmdebstrap from the machine's own apt sources (the Debian repositories
# `apt-get indextargets` lists: a local mirror in CI, deb.debian.org elsewhere).
# Kept under build/deploy/ so that a rerun takes none of the minutes this costs.
#
#   apt      minbase (essential, apt, Priority: required): the stand-in for the debian:bookworm and
#            debian:bookworm-slim images helm/image/Dockerfile starts FROM
#   systemd  + systemd, dbus and feedfs's runtime libraries: booted by systemd-nspawn
#
# An existing OUT.tar is kept as it is (delete it to rebuild).
set -euo pipefail
kind=${1:?usage: rootfs.sh apt|systemd OUT.tar}
out=${2:?usage: rootfs.sh apt|systemd OUT.tar}
[ -f "$out" ] && [ -s "$out" ] && exit 0
command -v mmdebstrap >/dev/null || { echo "rootfs.sh: mmdebstrap is not installed (tests/deps.sh --deploy)" >&2; exit 1; }

case "$kind" in
apt)     include=ca-certificates ;;
systemd) include=systemd,systemd-sysv,dbus,fuse3,libfuse3-3,libcurl4,libssl3,libxml2,liburing2,ca-certificates,util-linux,procps ;;
*)       echo "rootfs.sh: unknown kind '$kind' (apt or systemd)" >&2; exit 1 ;;
esac

# One "deb URI SUITE COMPONENT" line per Debian repository this machine's apt uses.
sources=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' \
	'Identifier: Packages' 'Origin: Debian' | sort -u | sed 's/^/deb /')
[ -n "$sources" ] || { echo "rootfs.sh: apt lists no Debian repository (run apt-get update)" >&2; exit 1; }

mkdir -p "$(dirname "$out")"
tmp=${out%.tar}.tmp$$.tar       # mmdebstrap picks the format by the name
trap 'rm -f "$tmp"' EXIT
printf '%s\n' "$sources" | mmdebstrap --quiet --variant=minbase --include="$include" bookworm "$tmp" -
mv "$tmp" "$out"
trap - EXIT
