#!/bin/bash
# deps.sh — install what building and testing feedfs needs on Debian 12.
#
#   tests/deps.sh                      install everything (apt packages, then `npm ci` in tests/)
#   tests/deps.sh --check-or-install   check quickly; install only what is missing
#   ... --deploy                       also what `make test-deploy` needs (mmdebstrap,
#                                      podman, runc, systemd-container)
#
# Idempotent: running it twice changes nothing the second time. Prints each step.
#
# Node.js: s3rver 3.7.1 (pinned in tests/package-lock.json) runs on any Node >= 8.3.
# We install Debian's nodejs/npm only when no `node`/`npm` is on the machine: a
# preinstalled Node (e.g. NodeSource's nodejs, which bundles npm) is kept as it is,
# because Debian's `npm` package would pull Debian's nodejs and fight with it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=/usr/bin/python3
PKG_MODULES=(fuse3 libcurl openssl libxml-2.0 liburing)
APT_PKGS=(build-essential pkg-config libfuse3-dev fuse3 libcurl4-openssl-dev libssl-dev
          libxml2-dev liburing-dev python3 python3-boto3 python3-pytest python3-pytest-xdist python3-prometheus-client
          python3-torch python3-torchvision mypy python3-build python3-venv python3-setuptools
          python3-wheel curl ca-certificates iproute2
          clang libclang-rt-14-dev valgrind
          python3-yaml python3-kubernetes systemd
          golang-go golang-google-grpc-dev python3-grpcio
          golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev)
# make test-deploy: a Debian root from apt, the image built and run, a booted systemd
DEPLOY_PKGS=(mmdebstrap podman runc systemd-container)
S3RVER_VERSION=3.7.1

say() { printf 'deps: %s\n' "$*"; }
die() { printf 'deps: error: %s\n' "$*" >&2; exit 1; }

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || die "not root and no sudo: run as root"
	SUDO=sudo
fi

apt_install() {
	say "apt-get install $*"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" </dev/null
}

apt_updated=0
apt_update() {
	[ "$apt_updated" = 1 ] && return 0
	say "apt-get update"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null
	apt_updated=1
}

# --- checks (each prints nothing; returns non-zero when something is missing) ---
check_system() {
	local ok=0 m
	command -v cc >/dev/null 2>&1 || { say "missing: C compiler (cc)"; ok=1; }
	command -v make >/dev/null 2>&1 || { say "missing: make"; ok=1; }
	if command -v pkg-config >/dev/null 2>&1; then
		for m in "${PKG_MODULES[@]}"; do
			pkg-config --exists "$m" || { say "missing: pkg-config module $m"; ok=1; }
		done
	else
		say "missing: pkg-config"; ok=1
	fi
	command -v fusermount3 >/dev/null 2>&1 || { say "missing: fusermount3"; ok=1; }
	if [ -x "$PY" ]; then
		"$PY" -c 'import boto3, pytest, xdist, prometheus_client' 2>/dev/null || { say "missing: $PY modules boto3/pytest/xdist/prometheus_client"; ok=1; }
		# the loader-order tests run a real DataLoader over torchvision's ImageFolder
		"$PY" -c 'import torch, torchvision' 2>/dev/null || { say "missing: $PY modules torch/torchvision"; ok=1; }
		# make python-wheel builds the wheel offline; python-wheel-test installs it in a
		# venv; test_typing.py runs mypy on the package and a typed user of it
		"$PY" -c 'import mypy, build, setuptools, wheel, ensurepip' 2>/dev/null || { say "missing: $PY modules mypy/build/setuptools/wheel/ensurepip (mypy python3-build python3-setuptools python3-wheel python3-venv)"; ok=1; }
	else
		say "missing: $PY"; ok=1
	fi
	command -v curl >/dev/null 2>&1 || { say "missing: curl"; ok=1; }
	# the chart's render test checks objects against python3-kubernetes' models;
	# the unit test runs systemd-analyze verify
	"$PY" -c 'import yaml, kubernetes' 2>/dev/null || { say "missing: $PY modules yaml/kubernetes"; ok=1; }
	command -v systemd-analyze >/dev/null 2>&1 || { say "missing: systemd-analyze (systemd)"; ok=1; }
	# feedfs-csi (csi/, Go) builds offline against Debian's gRPC; its tests
	# call it over its socket with python3-grpcio
	command -v go >/dev/null 2>&1 || { say "missing: go (golang-go)"; ok=1; }
	[ -d /usr/share/gocode/src/google.golang.org/grpc ] || { say "missing: golang-google-grpc-dev"; ok=1; }
	"$PY" -c 'import grpc' 2>/dev/null || { say "missing: $PY module grpc (python3-grpcio)"; ok=1; }
	# build/helmtmpl renders the chart with Go's text/template and sprig (GOPATH mode)
	[ -d /usr/share/gocode/src/github.com/Masterminds/sprig ] || { say "missing: golang-github-masterminds-sprig-dev"; ok=1; }
	[ -d /usr/share/gocode/src/sigs.k8s.io/yaml ] || { say "missing: golang-k8s-sigs-yaml-dev"; ok=1; }
	# the fuzz-smoke step of make test builds libFuzzer harnesses with clang
	command -v clang >/dev/null 2>&1 || { say "missing: clang"; ok=1; }
	dpkg -s libclang-rt-14-dev >/dev/null 2>&1 || { say "missing: libclang-rt-14-dev"; ok=1; }
	# make test runs unit tests and a few mounts under valgrind memcheck
	command -v valgrind >/dev/null 2>&1 || { say "missing: valgrind"; ok=1; }
	return $ok
}

check_deploy() {
	local ok=0 c
	for c in mmdebstrap podman runc systemd-nspawn; do
		command -v $c >/dev/null 2>&1 || { say "missing: $c (make test-deploy)"; ok=1; }
	done
	return $ok
}

check_node() {
	command -v node >/dev/null 2>&1 || { say "missing: node"; return 1; }
	command -v npm >/dev/null 2>&1 || { say "missing: npm"; return 1; }
	return 0
}

check_s3rver() {
	[ -x "$here/node_modules/.bin/s3rver" ] || { say "missing: tests/node_modules/.bin/s3rver"; return 1; }
	local v
	v=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$here/node_modules/s3rver/package.json" 2>/dev/null)
	[ "$v" = "$S3RVER_VERSION" ] || { say "s3rver in tests/node_modules is '$v', want $S3RVER_VERSION"; return 1; }
	return 0
}

# --- installers ---
install_system() {
	apt_update
	apt_install "${APT_PKGS[@]}"
}

install_deploy() {
	apt_update
	apt_install "${DEPLOY_PKGS[@]}"
}

install_node() {
	if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
		say "keeping the installed node $(node --version) / npm $(npm --version)"
		return 0
	fi
	if command -v node >/dev/null 2>&1; then
		# node without npm: only Debian's nodejs may be completed with Debian's npm.
		local ver
		ver=$(dpkg-query -W -f='${Version}' nodejs 2>/dev/null || true)
		case "$ver" in
		""|*nodesource*)
			die "node $(node --version) is installed without npm and is not Debian's nodejs; install npm for it" ;;
		esac
		apt_update
		apt_install npm
		return 0
	fi
	apt_update
	apt_install nodejs npm
}

install_s3rver() {
	command -v npm >/dev/null 2>&1 || die "npm not found"
	say "npm ci in tests/ (s3rver $S3RVER_VERSION, node $(node --version), npm $(npm --version))"
	(cd "$here" && npm ci --no-audit --no-fund --loglevel=error </dev/null)
	check_s3rver || die "npm ci did not install s3rver $S3RVER_VERSION"
}

verify_node() {
	local major
	major=$(node -p 'process.versions.node.split(".")[0]')
	[ "$major" -ge 10 ] || die "node $(node --version) is too old for s3rver $S3RVER_VERSION (need >= 10)"
}

deploy=0
if [ "${2:-}" = --deploy ] || [ "${1:-}" = --deploy ]; then
	deploy=1
	[ "${1:-}" = --deploy ] && shift
fi

case "${1:-}" in
--check-or-install)
	if [ $deploy = 1 ]; then check_deploy || install_deploy; check_deploy || die "make test-deploy's packages still missing"; fi
	sys_ok=0; node_ok=0; s3_ok=0
	check_system || sys_ok=1
	check_node || node_ok=1
	check_s3rver || s3_ok=1
	if [ $sys_ok = 0 ] && [ $node_ok = 0 ] && [ $s3_ok = 0 ]; then
		say "all dependencies present"
		exit 0
	fi
	[ $sys_ok = 0 ] || install_system
	[ $node_ok = 0 ] || install_node
	verify_node
	[ $s3_ok = 0 ] && [ $node_ok = 0 ] || install_s3rver
	check_system || die "system dependencies still missing after install"
	say "done"
	;;
"")
	[ $deploy = 1 ] && install_deploy
	install_system
	install_node
	verify_node
	install_s3rver
	check_system || die "system dependencies still missing after install"
	say "done"
	;;
-h|--help)
	sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
	;;
*)
	die "unknown option '$1' (use --check-or-install or no option)"
	;;
esac
