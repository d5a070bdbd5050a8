#!/bin/bash
# bench/gpu_device_run.sh — one short run on a lent GPU machine (issue 32):
# probe what the machine has, then bench/gpu_feed.py end to end (every byte
# of the device tensor checked, then the figures). Results go to $OUT.
#
#   bench/gpu_device_run.sh [gpu_feed.py args...]
#
# Expects build/ from the CPU machine (make all). When the machine lacks a
# library that build/feedfs links, build/devlibs.tar.xz (made on the CPU
# machine from `ldd build/feedfs`, glibc excluded) is unpacked and put on
# LD_LIBRARY_PATH.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
say() { printf '== %s\n' "$*"; }

say "probe $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -5
nvidia-smi 2>&1 | grep -m1 'CUDA Version'
uname -r; (. /etc/os-release; echo "$PRETTY_NAME"); ldd --version | head -1
ls -l /dev/fuse; id -u; nproc; free -g | head -2
grep -m1 fuse /proc/filesystems
PY=$(command -v python3)
for p in python3 /usr/bin/python3 /opt/conda/bin/python3; do
	command -v "$p" >/dev/null && "$p" -c "import torch" 2>/dev/null && { PY=$(command -v "$p"); break; }
done
echo "python: $PY $($PY -V 2>&1)"
timeout 60 "$PY" - <<'EOF'
import sys
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
    if torch.cuda.is_available():
        print("device", torch.cuda.get_device_name(0))
    import numpy; print("numpy", numpy.__version__)
except Exception as e:
    print("torch: error:", e)
EOF
find / -xdev -name 'libcudart.so*' 2>/dev/null | head -5
ldconfig -p | grep -E 'libcuda.so.1|libcudart' | head

missing=$(ldd build/feedfs | grep 'not found')
if [ -n "$missing" ]; then
	say "missing libraries: $(echo "$missing" | awk '{print $1}' | tr '\n' ' ')"
	tar -C build -xJf build/devlibs.tar.xz
	export LD_LIBRARY_PATH=$PWD/build/devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	ldd build/feedfs | grep 'not found' && { say "still missing, stop"; exit 1; }
fi
command -v fusermount3 >/dev/null || {
	[ -d build/devlibs ] || tar -C build -xJf build/devlibs.tar.xz
	mkdir -p /tmp/fbin && cp build/devlibs/fusermount3 /tmp/fbin/ && export PATH=/tmp/fbin:$PATH
}
build/feedfs --version

say "fuse mount check"
m=$(mktemp -d) && timeout 30 build/feedfs --dry-run s3://x --endpoint-url http://127.0.0.1:1 >/dev/null 2>&1
echo "dry-run rc=$? (1 expected: nothing listens)"
rmdir "$m"

# The disk cache on this machine's disk (O_DIRECT reads: the disk is the
# ceiling), then on tmpfs (buffered: what the daemon's own path can do).
for where in disk:/var/tmp:4 tmpfs:/dev/shm:4 tmpfs:/dev/shm:16; do
	blk=${where##*:} where=${where%:*}
	say "gpu_feed.py (cache on ${where%%:*}, blocks of $blk MiB) $*"
	TMPDIR=${where#*:} timeout 300 "$PY" bench/gpu_feed.py build/feedfs \
		--block-mib "$blk" --json "$OUT/gpu_feed-${where%%:*}-$blk.json" "$@"
	echo "gpu_feed rc=$?"
	for f in "${where#*:}"/feedfs-devbench-*/feedfs.log; do [ -f "$f" ] && tail -20 "$f"; done
done
say "done $(date -u +%FT%TZ)"
