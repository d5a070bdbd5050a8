# feedfs — one Makefile that documents itself: `make help`.
#
#   make            build build/feedfs (and build/feedfs-csi, the CSI node plugin, in Go)
#   make test       unit tests + ASan/UBSan build + integration tests (real FUSE, real s3rver)
#   make demo       local S3 server + sample dataset + mount + a training-style read pass
#   make deps       install Debian packages and the pinned npm test server
#   V=1             show full compiler command lines
#   SANITIZE=address,undefined   build with sanitizers (into build/san-<list>/)

PREFIX    ?= /usr/local
CC        ?= cc
PKGS      := fuse3 libcurl openssl libxml-2.0 liburing
PYTHON    ?= /usr/bin/python3

ifeq ($(V),1)
Q :=
else
Q := @
endif

ifneq ($(SANITIZE),)
BUILD     ?= build/san-$(subst $(comma),-,$(SANITIZE))
SANFLAGS  := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
OPTFLAGS  ?= -O1 -g
else
BUILD     ?= build
SANFLAGS  :=
OPTFLAGS  ?= -O2 -g
endif
comma := ,

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

CFLAGS   ?=
CFLAGS   += -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow \
            -Wformat=2 -D_FILE_OFFSET_BITS=64 -D_GNU_SOURCE -pthread \
            -Iinclude $(PKG_CFLAGS) $(OPTFLAGS) $(SANFLAGS) -MMD -MP
LDLIBS   += $(PKG_LIBS) -pthread -ldl -lm
LDFLAGS  += $(SANFLAGS)

# Every module's sources, except the program entry point, the mount helper
# and the client library (src/lib/), go into one archive so that each unit
# test binary links only what it uses. build/libfeedfs.{a,so} is the client library.
LIB_SRCS  := $(filter-out src/main.c src/mount_helper.c src/lib/%,$(wildcard src/*.c src/*/*.c))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
LIB       := $(BUILD)/libfeedfsd.a

# The device path's CUDA code (src/gpu/cuda.c) is checked against the
# toolkit's headers when they are there; it never links CUDA (dlopen).
# `make CUDA_HOME=/nonexistent` builds it against its own declarations.
CUDA_HOME ?= /usr/local/cuda
ifneq ($(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h),)
$(BUILD)/obj/src/gpu/cuda.o: CFLAGS += -DFEEDFS_HAVE_CUDA_H -isystem $(CUDA_HOME)/include
endif

# libfeedfs: the client library of the device-feed path (include/feedfs/libfeedfs.h).
CLIB_SRCS := $(wildcard src/lib/*.c)
CLIB_OBJS := $(CLIB_SRCS:%.c=$(BUILD)/obj/pic/%.o)
CLIB_A    := $(BUILD)/libfeedfs.a
CLIB_SO   := $(BUILD)/libfeedfs.so
CLIB_SONAME := libfeedfs.so.1
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
UNIT_HARN := $(BUILD)/obj/tests/unit/harness.o $(BUILD)/obj/tests/unit/fake_fetch.o

.SECONDARY:
.PHONY: all help install uninstall test test-stress unit asan integration demo deps clean bench \
        python-test python-wheel python-wheel-test fuzz fuzz-bins fuzz-smoke tsan valgrind soak csi-test image test-deploy

all: $(BUILD)/feedfs $(BUILD)/mount.feedfs $(BUILD)/feedfs-csi $(CLIB_A) $(CLIB_SO) $(BUILD)/tests/lib_client $(BUILD)/tests/libfake_cudart.so ## build build/feedfs, build/mount.feedfs, build/feedfs-csi and libfeedfs (default)

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 16

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/obj/pic/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $< (pic)")
	$(Q)$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -c -o $@ $<

$(CLIB_A): $(CLIB_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(CLIB_SO): $(CLIB_OBJS)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,$(CLIB_SONAME) -o $@ $^ -pthread -ldl

# The C test program of the library, run against a real mount by
# tests/integration/test_device.py.
$(BUILD)/tests/lib_client: tests/lib/lib_client.c $(CLIB_A)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(CLIB_A) -pthread -ldl

# A stand-in CUDA runtime (host memory, deferred copies) that the device
# tests load into the daemon with FEEDFS_CUDART, on machines without a GPU.
$(BUILD)/tests/libfake_cudart.so: tests/lib/fake_cudart.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(CFLAGS) -fPIC -shared -fvisibility=hidden $(LDFLAGS) -o $@ $< -pthread

$(LIB): $(LIB_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

$(BUILD)/feedfs: $(BUILD)/obj/src/main.o $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The mount(8) helper needs only the option table and the fstab mapping.
$(BUILD)/mount.feedfs: $(BUILD)/obj/src/mount_helper.o $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# feedfs-csi, the CSI node plugin (csi/, Go): built offline against Debian's
# golang-google-grpc-dev in GOPATH mode, no module download.
GO        ?= go
GOENV     := GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS=
VERSION   := $(shell sed -n 's/^\#define FEEDFS_VERSION "\(.*\)"/\1/p' include/feedfs/options.h)
CSI_SRCS  := $(filter-out %_test.go,$(wildcard csi/*.go))

$(BUILD)/feedfs-csi: $(CSI_SRCS) include/feedfs/options.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GO      $@")
	$(Q)$(GOENV) $(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o $@ ./csi

csi-test: ## unit tests of feedfs-csi (wire format, volume attributes)
	$(GOENV) $(GO) vet ./csi
	$(GOENV) $(GO) test ./csi

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(UNIT_HARN) $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Where make install puts things. mount(8) looks for helpers in /sbin only
# (/sbin/fs.d, /sbin/fs: rare), whatever PREFIX is: hence SBINDIR's default.
BINDIR    ?= $(PREFIX)/bin
SBINDIR   ?= /sbin
MANDIR    ?= $(PREFIX)/share/man
UNITDIR   ?= $(PREFIX)/lib/systemd/system
DOCDIR    ?= $(PREFIX)/share/doc/feedfs
# The Python package goes where Debian's python3 looks: /usr/lib/python3/dist-packages
# for PREFIX=/usr, <prefix>/lib/python3.X/dist-packages otherwise (on sys.path for
# /usr/local; other prefixes need PYTHONPATH; without $(PYTHON): python3). feedfs.device finds libfeedfs.so.1 in
# <prefix>/lib from there.
PYTHONDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(PY_XY)/dist-packages)
PY_XY      = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo 3)
PY_SRCS   := $(wildcard python/feedfs/*.py)

install: $(BUILD)/feedfs $(BUILD)/mount.feedfs $(BUILD)/feedfs-csi $(CLIB_A) $(CLIB_SO) ## install under DESTDIR/PREFIX (/usr/local): binaries, helper, CSI plugin, units, man pages, libfeedfs, python package
	install -D -m 0755 $(BUILD)/feedfs $(DESTDIR)$(BINDIR)/feedfs
	install -D -m 0755 $(BUILD)/feedfs-csi $(DESTDIR)$(BINDIR)/feedfs-csi
	install -D -m 0644 docs/feedfs-csi.8 $(DESTDIR)$(MANDIR)/man8/feedfs-csi.8
	install -D -m 0755 $(BUILD)/mount.feedfs $(DESTDIR)$(SBINDIR)/mount.feedfs
	install -D -m 0644 docs/feedfs.1 $(DESTDIR)$(MANDIR)/man1/feedfs.1
	install -D -m 0644 docs/mount.feedfs.8 $(DESTDIR)$(MANDIR)/man8/mount.feedfs.8
	install -d $(DESTDIR)$(UNITDIR)
	sed 's#/usr/local/bin/feedfs#$(BINDIR)/feedfs#' systemd/feedfs@.service \
		>$(DESTDIR)$(UNITDIR)/feedfs@.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/feedfs@.service
	install -D -m 0644 systemd/feedfs.env.example $(DESTDIR)$(DOCDIR)/feedfs.env.example
	install -D -m 0644 docs/DEPLOY.md $(DESTDIR)$(DOCDIR)/DEPLOY.md
	install -d $(DESTDIR)$(PYTHONDIR)/feedfs
	install -m 0644 $(PY_SRCS) python/feedfs/py.typed $(DESTDIR)$(PYTHONDIR)/feedfs/
	install -D -m 0644 include/feedfs/libfeedfs.h $(DESTDIR)$(PREFIX)/include/feedfs/libfeedfs.h
	install -D -m 0644 include/feedfs/feedfs_ioctl.h $(DESTDIR)$(PREFIX)/include/feedfs/feedfs_ioctl.h
	install -D -m 0644 $(CLIB_A) $(DESTDIR)$(PREFIX)/lib/libfeedfs.a
	install -D -m 0755 $(CLIB_SO) $(DESTDIR)$(PREFIX)/lib/$(CLIB_SONAME)
	ln -sf $(CLIB_SONAME) $(DESTDIR)$(PREFIX)/lib/libfeedfs.so

uninstall: ## remove what install put in place
	rm -f $(DESTDIR)$(BINDIR)/feedfs $(DESTDIR)$(SBINDIR)/mount.feedfs \
	      $(DESTDIR)$(BINDIR)/feedfs-csi $(DESTDIR)$(MANDIR)/man8/feedfs-csi.8 \
	      $(DESTDIR)$(MANDIR)/man1/feedfs.1 $(DESTDIR)$(MANDIR)/man8/mount.feedfs.8 \
	      $(DESTDIR)$(UNITDIR)/feedfs@.service $(DESTDIR)$(DOCDIR)/feedfs.env.example \
	      $(DESTDIR)$(DOCDIR)/DEPLOY.md
	rm -f $(DESTDIR)$(PREFIX)/include/feedfs/libfeedfs.h $(DESTDIR)$(PREFIX)/include/feedfs/feedfs_ioctl.h
	rm -f $(DESTDIR)$(PREFIX)/lib/libfeedfs.a $(DESTDIR)$(PREFIX)/lib/libfeedfs.so \
	      $(DESTDIR)$(PREFIX)/lib/$(CLIB_SONAME)
	-rmdir $(DESTDIR)$(PREFIX)/include/feedfs
	rm -rf $(DESTDIR)$(PYTHONDIR)/feedfs
	-rmdir $(DESTDIR)$(DOCDIR)

deps: ## install build and test dependencies (Debian packages, pinned npm s3rver)
	tests/deps.sh

unit: $(UNIT_BINS) ## build and run the unit tests
	@tests/run_unit.sh $(UNIT_BINS)

asan: ## build feedfs and unit tests with ASan+UBSan and run the unit tests
	$(MAKE) SANITIZE=address,undefined unit all

integration: $(BUILD)/feedfs ## integration tests: real FUSE mounts over a local s3rver
	tests/integration/run.sh $(BUILD)/feedfs

# python/feedfs against a fake control socket (no mount), mypy included; about 20 s.
python-test: ## tests of the Python package (python/feedfs, from the tree) against a fake control socket, and mypy
	cd tests/python && PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -q

# The wheel users install: built offline (Debian's python3-build, setuptools) from
# a copy of python/ with libfeedfs.so.1 beside the modules (py3-none-<platform>).
PYWHEEL := $(BUILD)/python
python-wheel: $(CLIB_SO) ## build the Python wheel (libfeedfs.so.1 inside) into build/python/dist
	rm -rf $(PYWHEEL)/src $(PYWHEEL)/dist
	mkdir -p $(PYWHEEL)/src/feedfs
	cp python/pyproject.toml python/setup.py python/README.md $(PYWHEEL)/src/
	cp $(PY_SRCS) python/feedfs/py.typed $(PYWHEEL)/src/feedfs/
	cp $(CLIB_SO) $(PYWHEEL)/src/feedfs/libfeedfs.so.1
	cd $(PYWHEEL)/src && $(PYTHON) -m build --no-isolation --wheel --outdir ../dist . \
		>../build.log 2>&1 || { cat ../build.log; exit 1; }
	@ls $(PYWHEEL)/dist/*.whl

# The same tests against that wheel pip-installed (no network) into a fresh venv
# that sees Debian's torch and pytest: the package as users get it.
python-wheel-test: python-wheel ## the Python tests against the wheel installed in a fresh venv
	rm -rf $(PYWHEEL)/venv
	$(PYTHON) -m venv --system-site-packages $(PYWHEEL)/venv
	$(PYWHEEL)/venv/bin/python -m pip install -q --no-index --no-deps $(PYWHEEL)/dist/feedfs-*.whl
	cd tests/python && FEEDFS_TEST_INSTALLED=1 $(abspath $(PYWHEEL))/venv/bin/python -m pytest -q

NPROC := $(shell nproc 2>/dev/null || echo 2)

test: ## everything CI runs: deps, unit, ASan/UBSan, valgrind, fuzz seeds, integration (plain, ASan, TSan, valgrind)
	tests/deps.sh --check-or-install
	$(MAKE) -j$(NPROC) all
	$(MAKE) unit
	$(MAKE) python-test
	$(MAKE) python-wheel-test
	$(MAKE) csi-test
	$(MAKE) -j$(NPROC) SANITIZE=address,undefined all
	$(MAKE) asan
	$(MAKE) -j$(NPROC) SANITIZE=thread build/san-thread/feedfs
	$(MAKE) valgrind
	$(MAKE) fuzz-smoke
	FEEDFS_SAN_BIN=build/san-address-undefined/feedfs FEEDFS_TSAN_BIN=build/san-thread/feedfs \
	FEEDFS_VALGRIND=1 tests/integration/run.sh build/feedfs

# Load-dependent failures (races) show under load: the integration passes
# STRESS_ROUNDS times (default 3) with STRESS_HOGS busy loops (default 2)
# beside them; stops at the first failing round. Not in CI (an hour or more).
test-stress: ## integration passes (plain, ASan, TSan, valgrind) STRESS_ROUNDS times beside STRESS_HOGS CPU hogs
	tests/deps.sh --check-or-install
	$(MAKE) -j$(NPROC) all
	$(MAKE) -j$(NPROC) SANITIZE=address,undefined all
	$(MAKE) -j$(NPROC) SANITIZE=thread build/san-thread/feedfs
	ROUNDS='$(STRESS_ROUNDS)' HOGS='$(STRESS_HOGS)' tests/stress.sh build/feedfs

demo: ## local S3 server + sample dataset + mount + a training-style read pass + the PyTorch example
	tests/deps.sh --check-or-install
	$(MAKE) all
	tests/demo.sh build/feedfs

bench: ## side-by-side benchmarks (not part of test)
	QUICK='$(QUICK)' SIZE_SCALE='$(SIZE_SCALE)' REPS='$(REPS)' CONTENDERS='$(CONTENDERS)' \
	WORKLOADS='$(WORKLOADS)' LATENCY_MS='$(LATENCY_MS)' BW_MBPS='$(BW_MBPS)' \
	PASS_TIMEOUT='$(PASS_TIMEOUT)' RAND_SECONDS='$(RAND_SECONDS)' MAX_MINUTES='$(MAX_MINUTES)' \
	PREPARE_ONLY='$(PREPARE_ONLY)' FAULTS='$(FAULTS)' bench/run.sh

# Millions of keys (issue 22): walks, stats and reads by path of computed keys
# (bench/synth_s3.py) against a plain listing client; results in bench/results/.
bench-scale: $(BUILD)/feedfs ## walks of 1M and 10M computed keys, --max-memory 256M (SCALE_STAT=1: also stat 1M); snapshot mounts at 64M
	python3 bench/scale.py --dirs 1000 --files 1000 --max-memory 256M \
		$(if $(SCALE_STAT),,--no-stat) --out bench/results/scale-1m.json
	python3 bench/scale.py --dirs 1000 --files 10000 --max-memory 256M --no-stat \
		--reads 100 --out bench/results/scale-10m.json
	python3 bench/snap_scale.py --dirs 1000 --files 1000 --max-memory 64M \
		--out bench/results/snap-1m.json
	python3 bench/snap_scale.py --dirs 1000 --files 10000 --max-memory 64M --no-listed \
		--out bench/results/snap-10m.json

# The FUSE passthrough that bench/fuse_ceiling.py measures feedfs's disk cache against.
build/bench/fuse_ceiling: bench/fuse_ceiling.c ## bench probe: FUSE's own ceiling on local files
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -O2 -g \
		$(shell pkg-config --cflags fuse3) -o $@ $< $(shell pkg-config --libs fuse3) -pthread

# The do-nothing passthrough daemon that bench/pt_ab.py (floor:N) measures feedfs against.
build/bench/pt_floor: bench/pt_floor.c include/feedfs/fuse_passthrough.h ## bench probe: the least a daemon does per passthrough open
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) -std=gnu11 -Wall -Wextra -Werror -O2 -g -Iinclude -o $@ $< -pthread

# ---- robustness: fuzzers, TSan, valgrind, soak (docs/SECURITY.md) ----------
# libFuzzer harnesses (tests/fuzz/fuzz_*.c) link against the library built with
# clang and -fsanitize=fuzzer-no-link,address,undefined into build/fuzz/.
FUZZ_SECONDS ?= 60
FUZZ_NAMES   := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_MAKE    := $(MAKE) --no-print-directory CC=clang BUILD=build/fuzz \
                SANITIZE=address,undefined,fuzzer-no-link OPTFLAGS='-O1 -g'

$(BUILD)/fuzzers/%: tests/fuzz/%.c $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZ-LD $@")
	$(Q)$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

fuzz-bins: ## build the libFuzzer harnesses (clang) into build/fuzz/fuzzers/
	$(Q)$(FUZZ_MAKE) $(addprefix build/fuzz/fuzzers/,$(FUZZ_NAMES))

fuzz-smoke: fuzz-bins ## run every fuzzer over its committed seed corpus only
	$(Q)for f in $(FUZZ_NAMES); do \
		build/fuzz/fuzzers/$$f tests/fuzz/corpus/$$f/* >build/fuzz/$$f.smoke.log 2>&1 \
		  || { tail -40 build/fuzz/$$f.smoke.log; echo "fuzz-smoke: $$f FAILED"; exit 1; }; \
		echo "  fuzz-smoke $$f: $$(ls tests/fuzz/corpus/$$f | wc -l) inputs ok"; \
	done

fuzz: fuzz-bins ## run every fuzzer for FUZZ_SECONDS (default 60) each
	$(Q)for f in $(FUZZ_NAMES); do \
		mkdir -p build/fuzz/corpus/$$f build/fuzz/crashes; \
		build/fuzz/fuzzers/$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
		  -artifact_prefix=build/fuzz/crashes/$$f- -max_len=65536 \
		  build/fuzz/corpus/$$f tests/fuzz/corpus/$$f >build/fuzz/$$f.log 2>&1 \
		  || { tail -60 build/fuzz/$$f.log; echo "fuzz: $$f FAILED"; exit 1; }; \
		echo "  fuzz $$f: $$(grep -o 'number_of_executed_units: [0-9]*' build/fuzz/$$f.log | grep -o '[0-9]*$$') executions in $(FUZZ_SECONDS)s"; \
	done

TSAN_TESTS := test_prefetch test_ahead test_hint test_cache test_creds

tsan: ## concurrent unit tests (prefetch, ahead, hint, cache, creds) under ThreadSanitizer
	$(Q)$(MAKE) --no-print-directory SANITIZE=thread $(addprefix build/san-thread/tests/,$(TSAN_TESTS))
	$(Q)FEEDFS_WD_SCALE=$${FEEDFS_WD_SCALE:-10} TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
		tests/run_unit.sh $(addprefix build/san-thread/tests/,$(TSAN_TESTS))

# test_cache and test_promote are left out: valgrind 3.19 does not model io_uring and the tests
# wait forever for completions (ASan and TSan cover them).
VG_BINS := $(filter-out %/test_cache %/test_promote,$(UNIT_BINS))

valgrind: $(VG_BINS) ## unit tests under valgrind memcheck (one per core): no errors, no definite leaks
	$(Q)printf '%s\n' $(VG_BINS) | xargs -P$(NPROC) -I{} sh -c '\
		FEEDFS_WD_SCALE=$${FEEDFS_WD_SCALE:-20} valgrind -q --error-exitcode=1 --leak-check=full \
		  --errors-for-leak-kinds=definite --show-leak-kinds=definite {} >{}.vg.log 2>&1 \
		  || { tail -60 {}.vg.log; echo "valgrind: {} FAILED"; exit 255; }; \
		echo "  valgrind $$(basename {}): clean"'

soak: $(BUILD)/feedfs ## SOAK_MINUTES (default 10) of 32 readers with faults on (not in CI)
	SOAK_MINUTES='$(SOAK_MINUTES)' FEEDFS_BIN=$(BUILD)/feedfs tests/soak.sh

# ---- deployment: the chart's renderer, the image, a booted systemd (issue 37) ----
# build/helmtmpl renders helm/feedfs with Go's text/template, sprig and Helm's
# additions (tests/helm/helmtmpl), built offline in GOPATH mode from Debian's
# golang-go and golang-*-dev packages in /usr/share/gocode.
GO_ENV := GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=$(CURDIR)/build/go-cache GOFLAGS=

build/helmtmpl: tests/helm/helmtmpl/main.go ## the chart renderer the tests use (Go + sprig)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GO      $@")
	$(Q)$(GO_ENV) go build -o $@ ./tests/helm/helmtmpl

# The image from helm/image/Dockerfile, built with podman on a Debian base made
# by mmdebstrap from this machine's apt sources (cached under build/deploy/).
IMAGE ?= localhost/feedfs:test
image: ## build helm/image/Dockerfile with podman as IMAGE (localhost/feedfs:test)
	tests/deploy/image.sh build $(IMAGE)

# The slow real-part tests, not in `make test`: the image built and run by
# podman, and feedfs@NAME and an fstab line under a booted systemd (nspawn).
DEPLOY_TESTS := tests/integration/test_image.py tests/integration/test_nspawn.py

test-deploy: ## the image built and run by podman, a booted systemd (nspawn); minutes, not in test
	tests/deps.sh --check-or-install --deploy
	$(MAKE) -j$(NPROC) all build/helmtmpl
	cd $(CURDIR) && FEEDFS_DEPLOY_TESTS=1 FEEDFS_BIN=$(abspath $(BUILD)/feedfs) \
		$(PYTHON) -m pytest -q $(DEPLOY_TESTS)

clean: ## remove build outputs
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
