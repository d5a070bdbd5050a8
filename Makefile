# feedfs — one Makefile that documents itself: `make help`.
#
#   make            build build/feedfs
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
.PHONY: all help install uninstall test unit asan integration demo deps clean bench \
        python-test fuzz fuzz-bins fuzz-smoke tsan valgrind soak

all: $(BUILD)/feedfs $(BUILD)/mount.feedfs $(CLIB_A) $(CLIB_SO) $(BUILD)/tests/lib_client $(BUILD)/tests/libfake_cudart.so ## build build/feedfs, build/mount.feedfs and libfeedfs (default)

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
PYTHONDIR ?= $(PREFIX)/lib/python3/dist-packages
PY_SRCS   := $(wildcard python/feedfs/*.py)

install: $(BUILD)/feedfs $(BUILD)/mount.feedfs $(CLIB_A) $(CLIB_SO) ## install under DESTDIR/PREFIX (/usr/local): binaries, helper, units, man pages, libfeedfs, python package
	install -D -m 0755 $(BUILD)/feedfs $(DESTDIR)$(BINDIR)/feedfs
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
	install -m 0644 $(PY_SRCS) $(DESTDIR)$(PYTHONDIR)/feedfs/
	install -D -m 0644 include/feedfs/libfeedfs.h $(DESTDIR)$(PREFIX)/include/feedfs/libfeedfs.h
	install -D -m 0644 include/feedfs/feedfs_ioctl.h $(DESTDIR)$(PREFIX)/include/feedfs/feedfs_ioctl.h
	install -D -m 0644 $(CLIB_A) $(DESTDIR)$(PREFIX)/lib/libfeedfs.a
	install -D -m 0755 $(CLIB_SO) $(DESTDIR)$(PREFIX)/lib/$(CLIB_SONAME)
	ln -sf $(CLIB_SONAME) $(DESTDIR)$(PREFIX)/lib/libfeedfs.so

uninstall: ## remove what install put in place
	rm -f $(DESTDIR)$(BINDIR)/feedfs $(DESTDIR)$(SBINDIR)/mount.feedfs \
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

# python/feedfs against a fake control socket (no mount); about a second.
python-test: ## tests of the Python helpers (python/feedfs) against a fake control socket
	cd tests/python && PYTHONPATH=$(CURDIR)/python $(PYTHON) -m pytest -q

NPROC := $(shell nproc 2>/dev/null || echo 2)

test: ## everything CI runs: deps, unit, ASan/UBSan, valgrind, fuzz seeds, integration (plain, ASan, TSan, valgrind)
	tests/deps.sh --check-or-install
	$(MAKE) -j$(NPROC) all
	$(MAKE) unit
	$(MAKE) python-test
	$(MAKE) -j$(NPROC) SANITIZE=address,undefined all
	$(MAKE) asan
	$(MAKE) -j$(NPROC) SANITIZE=thread build/san-thread/feedfs
	$(MAKE) valgrind
	$(MAKE) fuzz-smoke
	FEEDFS_SAN_BIN=build/san-address-undefined/feedfs FEEDFS_TSAN_BIN=build/san-thread/feedfs \
	FEEDFS_VALGRIND=1 tests/integration/run.sh build/feedfs

demo: ## local S3 server + sample dataset + mount + a training-style read pass
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

clean: ## remove build outputs
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
