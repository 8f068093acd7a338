# dataplane - one entry point: build, run, test, bench, sanitizers.
#
#   make                 build the service, library and tools into build/
#   make install         PREFIX=/usr/local DESTDIR=: binaries, library, header, pkg-config,
#                        systemd unit, man pages (make uninstall removes them)
#   make install-shim-mooncake  the opt-in `mooncake` import shim (dataplane's TransferEngine
#                        as mooncake.engine) into SHIM_TARGET= (default: the user site);
#                        refuses where a real mooncake is importable (docs/python.md)
#   make run             start dataplaned and run the demo client against it
#   make test            run every Criterion suite (and check-package, check-flags, the pytest suite)
#   make check-flags     every dataplaned flag named in dataplane/, the man page or
#                        docs/operations.md exists, and every --help flag is in both
#   make asan | tsan     the suites under ASan+UBSan / TSan (build/asan, build/tsan)
#   make faults          the fault-injection suite on a FAULTS=1 build (build/faults)
#   make bench-ring      ring vs DPDK rte_ring (P1, P2)
#   make bench-local     service vs fi_pingpong shm, io_uring NOP, memcpy (P3-P5)
#   make bench-fabric    two services in two netns over veth vs fi_pingpong tcp, ucx_perftest (P6, P7)
#   make bench-failover  a rail cut (link down, 100% loss) and slowed under load: recovery, ratio
#   make bench-gpu       GPU copies vs raw cudaMemcpyAsync on this GPU (P8-P10)
#   make bench-file      1 GiB file read through the service vs fio, O_DIRECT and buffered (P11)
#   make bench-instr     instructions per 64 B local WRITE, service and client side (callgrind)
#   make python          the Python package (dataplane, libclient/python) into $(B)/python
#   make bench-python    Python vs C: batch of 32 64 B WRITEs, single 64 B WRITE p50
#   make bench-vm        WRITEs from dp_register_mem memory vs dp_alloc regions, 64 KiB..256 MiB, 64 B
#   make bench-session   first contact with an engine session (open + first 4 KiB WRITE)
#   make bench-serving   KV pages through the C API, dataplane.mooncake and dataplane.nixl
#   make bench-vmtarget  another service's export of dp_register_mem memory vs of a dp_alloc
#                        region, 1..64 MiB: same host, and tcp between namespaces (as root)
#   make bench-scale     N pollers x N clients (rate, p99 vs N), 1000 idle queues, idle CPU,
#                        1 GiB WRITE striped over 1/2/4 pollers vs memcpy (S1-S5)
#   make format-check    clang-format --dry-run over the sources
#   CUDA=0|1             force CUDA off/on (default: detected)
#   PYTHON=python3.12    the interpreter of `make python`, its tests and install (default:
#                        Debian's /usr/bin/python3); PYTHONDIR= where install puts the package
#   FAULTS=1             compile in fault injection (DP_FAULTS; docs/reliability.md)
#   LIBFABRIC=PREFIX     build against the libfabric installed in PREFIX (e.g. 2.6 built by
#                        tools/build-libfabric.sh) instead of Debian's; binaries get an rpath

CC ?= gcc
B ?= build
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
SYSTEMDDIR ?= $(PREFIX)/lib/systemd/system
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
# One version (libclient/dp_version.h); the library's ABI has its own number.
VERSION := $(shell sed -n 's/^\#define DP_VERSION_STRING "\(.*\)"/\1/p' libclient/dp_version.h)
ABI_MAJOR := 1
SAN ?=
CUDA_HOME ?= /usr/local/cuda
ifeq ($(origin CUDA),undefined)
CUDA := $(if $(or $(shell command -v nvcc 2>/dev/null),$(wildcard $(CUDA_HOME)/bin/nvcc)),1,0)
endif

PKGS := libfabric liburing numa hiredis
# LIBFABRIC=PREFIX: pkg-config looks in PREFIX/lib/pkgconfig first (for
# $(shell) here and for recipes) and binaries find PREFIX/lib by rpath.
LIBFABRIC ?=
ifneq ($(LIBFABRIC),)
export PKG_CONFIG_PATH := $(LIBFABRIC)/lib/pkgconfig$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))
endif
PKG_CONFIG := $(if $(LIBFABRIC),PKG_CONFIG_PATH='$(PKG_CONFIG_PATH)' )pkg-config
CFLAGS := -std=gnu11 -O2 -g -Wall -Wextra -Werror -fPIC -D_GNU_SOURCE -pthread \
	-Iring -Ilibclient -Icommon -Itests $(EXTRA_CFLAGS)
LIBFABRIC_RPATH := -Wl,-rpath,$(LIBFABRIC)/lib
LDLIBS := -pthread $(if $(LIBFABRIC),$(LIBFABRIC_RPATH))
ifneq ($(filter deps,$(MAKECMDGOALS)),deps)
CFLAGS += $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
LDLIBS += $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)
endif
# What libclient itself needs at link time (the service and tools need more).
CLIENT_LIBS := -pthread
# The service alone (and the tests and fuzz target that link its auth.c):
# HMAC-SHA256 of the peer RPC from OpenSSL's libcrypto.
CRYPTO_LIBS := $(shell $(PKG_CONFIG) --libs libcrypto 2>/dev/null)
# The service's folders (docs/architecture.md, "Layout"): its own sources,
# the fuzz targets and nvcc find each other's headers through these.
DP_INC := -Idataplane/core -Idataplane/engines -Idataplane/control
# Device code (dataplane/engines/gpu_pages.cu: the page-batch kernel) is built by nvcc in
# CUDA builds only: SASS for sm_80 (A100) and sm_90 (H100, H200), PTX of
# sm_90 for the devices after them (the driver compiles it at load).
NVCC ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) nvcc)
NVCC_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
# No libstdc++ at link time: no exceptions, no guarded statics in host code.
NVCCFLAGS := -O3 -std=c++17 $(NVCC_ARCH) $(DP_INC) \
	-Xcompiler -fPIC,-Wall,-Wextra,-Werror,-fno-exceptions,-fno-threadsafe-statics
GPU_OBJS :=
ifeq ($(CUDA),1)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart
CFLAGS += -DDP_HAVE_CUDA -I$(CUDA_HOME)/include
LDLIBS += $(CUDA_LIBS)
CLIENT_LIBS += $(CUDA_LIBS)
GPU_OBJS := $(patsubst %.cu,$(B)/obj/%.o,$(wildcard dataplane/*/*.cu))
endif
ifeq ($(SAN),asan)
CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDLIBS += -fsanitize=address,undefined
CLIENT_LIBS += -fsanitize=address,undefined
endif
ifeq ($(FAULTS),1)
CFLAGS += -DDP_FAULT_INJECT
endif
ifeq ($(SAN),tsan)
CFLAGS += -fsanitize=thread -DDP_TSAN
LDLIBS += -fsanitize=thread
CLIENT_LIBS += -fsanitize=thread
# GCC's -Wtsan rejects fences. Those of the stats seqcounts (writer in
# stats.c, reader in ring-stat) pair across processes, out of TSan's sight.
$(B)/obj/dataplane/core/stats.o $(B)/obj/tools/ring-stat.o: CFLAGS += -Wno-tsan
endif
TEST_LIBS := $(shell pkg-config --libs criterion 2>/dev/null)

RING_SRCS := ring/ring.c
COMMON_SRCS := $(wildcard common/*.c)
CLIENT_SRCS := $(wildcard libclient/*.c) $(COMMON_SRCS)
# The gpu engine's operations: gpu_cuda.c in a CUDA build, gpu_none.c without.
GPU_NOT := $(if $(filter 1,$(CUDA)),dataplane/engines/gpu_none.c,dataplane/engines/gpu_cuda.c)
SERVICE_SRCS := $(filter-out $(GPU_NOT),$(wildcard dataplane/*.c dataplane/*/*.c)) $(COMMON_SRCS)
# The helper library every test binary links (tests/helpers.h declares it).
HELPER_SRCS := $(wildcard tests/helpers_*.c)
TEST_SRCS := $(filter-out $(HELPER_SRCS),$(wildcard tests/*.c))
RING_TEST_SRCS := $(wildcard tests/ring_*.c)
GPU_TEST_SRCS := $(wildcard tests/gpu_*.c)

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

LIBRING := $(B)/libdpring.a
LIBCLIENT_A := $(B)/libdataplane.a
SONAME := libdataplane.so.$(ABI_MAJOR)
LIBCLIENT_SO := $(B)/$(SONAME)
SERVICE := $(B)/dataplaned
# ring-bench links DPDK: it is built by bench-ring only, never by `all`.
TOOLS := $(B)/dp-bench $(B)/ring-stat $(B)/dp-demo $(B)/api-example \
	$(B)/gpu-bench $(B)/file-bench $(B)/failover-bench
TESTS := $(B)/tests/dp-tests $(B)/tests/ring-tests

# The Python package (docs/python.md): one extension built against the
# stable ABI (Py_LIMITED_API 3.11), libclient linked in statically, plus the
# pure-Python modules, laid out in $(B)/python as an importable tree.
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
PY_INCLUDE := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("include"))' 2>/dev/null)
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR ?= $(LIBDIR)/python$(PY_VERSION)/dist-packages
PY_SRC := libclient/python/dataplane
PY_FILES := $(wildcard $(PY_SRC)/*.py $(PY_SRC)/*.pyi) $(PY_SRC)/py.typed
# The extension's C files: _dataplane.c the module, one file per object.
PY_C := $(wildcard $(PY_SRC)/*.c)
PY_EXT := $(B)/python/dataplane/_dataplane.abi3.so
PY_OUT := $(PY_EXT) $(patsubst $(PY_SRC)/%,$(B)/python/dataplane/%,$(PY_FILES))
# make install installs the package where Python's headers are (else says why not).
HAVE_PY := $(if $(wildcard $(PY_INCLUDE)/Python.h),1,0)

.SECONDARY:
.PHONY: python bench-python test-python stress all deps deps-bench run test test-ring asan tsan \
	bench-ring bench-local bench-gpu bench-file bench-fabric bench-failover bench-instr bench-vm bench-vmtarget bench-session bench-serving bench-scale format \
	format-check gpu-tests clean deps-fuzz fuzz fuzz-regress stress faults install uninstall \
	install-shim-mooncake uninstall-shim-mooncake \
	check-package check-flags
all: $(LIBRING) $(LIBCLIENT_A) $(LIBCLIENT_SO) $(if $(SERVICE_SRCS),$(SERVICE)) \
	$(foreach t,$(TOOLS),$(if $(wildcard tools/$(notdir $(t)).c examples/$(notdir $(t)).c),$(t)))

# ---- dependencies (Debian packages, installed when missing and root) ----
deps:
	@PYTHON=$(PYTHON) tools/deps.sh bin:pkg-config=pkg-config bin:gcc=gcc bin:make=make \
		pc:libfabric=libfabric-dev pc:liburing=liburing-dev \
		pc:criterion=libcriterion-dev pc:numa=libnuma-dev \
		pc:hiredis=libhiredis-dev pc:libcrypto=libssl-dev bin:redis-server=redis-server bin:ip=iproute2 \
		bin:$(PYTHON)=python3 file:$(or $(PY_INCLUDE),/usr/include/python3)/Python.h=python3-dev \
		py:numpy=python3-numpy py:pytest=python3-pytest py:setuptools=python3-setuptools py:wheel=python3-wheel \
		py:pip=python3-pip

deps-bench: deps
	@tools/deps.sh pc:libdpdk=dpdk-dev bin:fi_pingpong=libfabric-bin bin:fio=fio \
		bin:gnuplot=gnuplot-nox

# ---- objects and libraries ----
$(B)/obj/dataplane/%.o: CFLAGS += $(DP_INC)
# The tests and tools that use a service header say which folder it is in
# here, not by a ../ path: what else of the service they reach is named.
$(B)/obj/tests/fabric_rpc.o: CFLAGS += -Idataplane/control
$(B)/obj/tests/fabric_topo.o $(B)/obj/tools/gpu-bench.o: CFLAGS += -Idataplane/engines
$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# Made anew each time: `ar r` into an old archive would keep the objects of
# source files that are gone (a file split in two).
$(LIBRING): $(call obj,$(RING_SRCS))
	rm -f $@ && $(AR) rcs $@ $^

$(LIBCLIENT_A): $(call obj,$(CLIENT_SRCS) $(RING_SRCS))
	rm -f $@ && $(AR) rcs $@ $^

# Only the public dp_* calls of dataplane.h are exported (libdataplane.map).
$(LIBCLIENT_SO): $(call obj,$(CLIENT_SRCS) $(RING_SRCS)) libclient/libdataplane.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=libclient/libdataplane.map \
		-Wl,--no-undefined -o $@ $(filter %.o,$^) $(CLIENT_LIBS)
	ln -sf $(SONAME) $(B)/libdataplane.so

$(B)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(SERVICE): $(call obj,$(SERVICE_SRCS)) $(GPU_OBJS) $(LIBRING)
	$(CC) -o $@ $^ $(LDLIBS) $(CRYPTO_LIBS)

# Tools link libclient statically so they run from the build tree as is.
$(B)/ring-bench: $(call obj,tools/ring-bench.c tools/bench-report.c) $(LIBRING)
	$(CC) -o $@ $^ $(LDLIBS) $(shell pkg-config --libs libdpdk 2>/dev/null)
$(B)/obj/tools/ring-bench.o: CFLAGS += $(shell pkg-config --cflags libdpdk 2>/dev/null) \
	-Wno-error=cast-qual -Wno-error=pedantic
$(B)/%: $(B)/obj/tools/%.o $(LIBCLIENT_A)
	$(CC) -o $@ $^ $(LDLIBS)
# dp-bench's benchmarks are files of their own (tools/dp-bench.h), linked
# before libclient, which they call.
$(B)/dp-bench: $(call obj,tools/dp-bench.c $(wildcard tools/dp-bench-*.c) tools/bench-report.c) \
		$(LIBCLIENT_A)
	$(CC) -o $@ $^ $(LDLIBS)
$(B)/file-bench: $(B)/obj/tools/bench-report.o
$(B)/failover-bench: $(B)/obj/tools/bench-report.o
$(B)/gpu-bench: $(B)/obj/tools/bench-report.o $(GPU_OBJS)
$(B)/%: $(B)/obj/examples/%.o $(LIBCLIENT_A)
	$(CC) -o $@ $^ $(LDLIBS)

# ---- the Python package ----
python: $(PY_OUT)
$(PY_EXT): $(PY_C) $(PY_SRC)/_dataplane.h $(LIBCLIENT_A) libclient/dataplane.h
	@mkdir -p $(dir $@)
	@test -f '$(PY_INCLUDE)/Python.h' || { echo "make python: no Python.h for $(PYTHON)" \
		"(apt-get install python3-dev, or make deps)" >&2; exit 1; }
	$(CC) $(CFLAGS) -Wno-missing-field-initializers -Wno-cast-function-type \
		-I'$(PY_INCLUDE)' -fvisibility=hidden -shared -o $@ $(PY_C) $(LIBCLIENT_A) \
		$(CLIENT_LIBS) -Wl,--exclude-libs,ALL
$(B)/python/dataplane/%: $(PY_SRC)/%
	@mkdir -p $(dir $@)
	cp $< $@

# ---- tests ----
# fabric_rpc speaks the peer protocol itself: it links the service's HMAC;
# fabric_topo tests the PCI distances of its rail choice.
$(B)/tests/dp-tests: $(call obj,$(TEST_SRCS) $(HELPER_SRCS) dataplane/control/auth.c \
	dataplane/engines/topo.c) $(LIBCLIENT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS) $(TEST_LIBS) $(CRYPTO_LIBS)
$(B)/tests/ring-tests: $(call obj,$(RING_TEST_SRCS) $(HELPER_SRCS)) $(LIBCLIENT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS) $(TEST_LIBS)
$(B)/tests/gpu_%: $(B)/obj/tests/gpu_%.o $(call obj,$(HELPER_SRCS)) $(LIBCLIENT_A)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(LDLIBS) $(TEST_LIBS)

# Tests find the service and tools through DP_BUILD.
CRITERION_ARGS ?= --jobs 1
# make test runs the long stress loops at 1/DP_STRESS_SCALE of their full
# size (50 M ring entries, 1 M wake-ups); `make stress` runs them whole.
DP_STRESS_SCALE ?= 4
test: deps
	@$(MAKE) --no-print-directory all $(B)/tests/dp-tests
	$(if $(SAN),,@$(MAKE) --no-print-directory check-package check-flags)
	DP_BUILD=$(abspath $(B)) DP_STRESS_SCALE=$(DP_STRESS_SCALE) $(B)/tests/dp-tests $(CRITERION_ARGS)
	$(if $(SAN)$(filter 0,$(PYTHON_TESTS)),,@$(MAKE) --no-print-directory test-python)

# The Python suite (tests/python, pytest) against real services; not under
# the sanitizers (the extension would need a sanitized interpreter).
# PYTEST_ARGS="-k lifetime" picks tests; make test PYTHON_TESTS=0 leaves them out.
PYTEST_ARGS ?=
PYTHON_TESTS ?= 1
test-python: deps
	@$(MAKE) --no-print-directory all python
	DP_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath $(B))/python PYTHONDONTWRITEBYTECODE=1 \
		$(PYTHON) -m pytest -q -p no:cacheprovider tests/python $(PYTEST_ARGS)

# The long runs: full-size ring stress and wake-up loops, long chaos.
stress: deps
	@$(MAKE) --no-print-directory all $(B)/tests/dp-tests
	DP_BUILD=$(abspath $(B)) DP_STRESS_SCALE=1 DP_STRESS_SECONDS=$${DP_STRESS_SECONDS:-600} \
		$(B)/tests/dp-tests $(CRITERION_ARGS) --filter 'ring_*/*'
	DP_BUILD=$(abspath $(B)) DP_STRESS_SCALE=1 DP_STRESS_SECONDS=$${DP_STRESS_SECONDS:-600} \
		$(B)/tests/dp-tests $(CRITERION_ARGS) --filter 'stress*/*' --verbose

test-ring: deps
	@$(MAKE) --no-print-directory $(B)/tests/ring-tests
	DP_BUILD=$(abspath $(B)) DP_STRESS_SCALE=$(DP_STRESS_SCALE) $(B)/tests/ring-tests $(CRITERION_ARGS)

# Sanitizer builds use their own trees; CUDA stays off there (the CUDA
# runtime and the sanitizers' shadow memory do not mix without a GPU).
asan: deps
	$(MAKE) --no-print-directory B=build/asan SAN=asan CUDA=0 test \
		ASAN_OPTIONS=detect_leaks=1
# TSan: the ring suites, then the poller's: service suites against a
# TSan-built dataplaned (the fixture starts $DP_BUILD/dataplaned, and it
# inherits TSAN_OPTIONS). halt_on_error: a race report ends the process at
# once with status 66. In the service, the test driving it fails (its calls
# get -ECONNRESET, or stop_service() sees 66); in a test process, the test
# crashes. Reports are kept in build/tsan/reports/ (a service's own log goes
# with its temp dir) and any report there fails the run. hostile_ring's
# rewrite test races on purpose, in the client, so it stays out; service_vm
# and hostile_vm run the vm engine's worker thread. About 3
# minutes of tests on 2 cores.
TSAN_FILTER ?= @(service_@(transfer|lifecycle|errors|stripe|parked|wakeup|vm)/*|hostile_ring/!(rewriting_*)|hostile_vm/*)
TSAN_REPORTS := $(abspath build/tsan/reports)
TSAN_SUPP := $(abspath tests/tsan.supp)
tsan: deps
	@rm -rf $(TSAN_REPORTS) && mkdir -p $(TSAN_REPORTS)
	@export TSAN_OPTIONS="halt_on_error=1:exitcode=66:log_path=$(TSAN_REPORTS)/tsan:suppressions=$(TSAN_SUPP)"; \
	rc=0; \
	$(MAKE) --no-print-directory B=build/tsan SAN=tsan CUDA=0 DP_STRESS_SCALE=50 test-ring || rc=1; \
	$(MAKE) --no-print-directory B=build/tsan SAN=tsan CUDA=0 \
		build/tsan/dataplaned build/tsan/tests/dp-tests || exit 1; \
	DP_BUILD=$(abspath build/tsan) DP_STRESS_SCALE=50 build/tsan/tests/dp-tests --jobs 1 \
		--filter '$(TSAN_FILTER)' || rc=1; \
	for f in $(TSAN_REPORTS)/tsan.*; do \
		[ -e "$$f" ] || continue; echo "== $$f"; cat "$$f"; rc=1; \
	done; \
	exit $$rc

# Fault injection: the service and the suites built with -DDP_FAULT_INJECT
# in their own tree; the fault_inject suite sets DP_FAULTS for its services
# (it skips itself in any other build).
faults: deps
	@$(MAKE) --no-print-directory B=build/faults FAULTS=1 build/faults/dataplaned \
		build/faults/tests/dp-tests
	DP_BUILD=$(abspath build/faults) build/faults/tests/dp-tests $(CRITERION_ARGS) \
		--filter 'fault_inject/*'

# The stress+chaos suite at length (make test runs it for 10 s).
DP_STRESS_SECONDS ?= 600

# ---- fuzzing: libFuzzer targets in tests/fuzz/, seeds in tests/corpus/<target>/ ----
FUZZ_CC ?= $(if $(shell command -v clang-14 2>/dev/null),clang-14,clang)
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_CFLAGS := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-D_GNU_SOURCE -Iring -Ilibclient -Icommon $(DP_INC)
FUZZ_LINK_fuzz_ring_attach := ring/ring.c
FUZZ_LINK_fuzz_rpc_reply := dataplane/control/rpc.c dataplane/control/rpc_server.c \
	dataplane/control/rpc_client.c dataplane/control/auth.c dataplane/core/event.c \
	dataplane/core/config.c common/net.c
FUZZ_LINK_fuzz_desc := ring/ring.c dataplane/core/poller.c dataplane/core/stats.c dataplane/core/log.c \
	dataplane/control/notif.c
FUZZ_LINK_fuzz_control := dataplane/control/ctlmsg.c
deps-fuzz: deps
	@tools/deps.sh bin:clang-14=clang-14 \
		file:/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a=libclang-rt-14-dev
$(B)/fuzz/%: tests/fuzz/%.c $(wildcard ring/*.[ch] libclient/*.h dataplane/*/*.[ch] dataplane/*/*.def)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(shell $(PKG_CONFIG) --cflags libfabric liburing 2>/dev/null) \
		$< $(FUZZ_LINK_$*) $(if $(filter dataplane/control/auth.c,$(FUZZ_LINK_$*)),$(CRYPTO_LIBS)) -o $@
# Each target for FUZZ_SECONDS from its seeds; what it finds stays in
# $(B)/fuzz/corpus/, a crash in $(B)/fuzz/<target>-crash-* (make fails).
fuzz: deps-fuzz
	@$(MAKE) --no-print-directory $(addprefix $(B)/fuzz/,$(FUZZ_TARGETS))
	@set -e; for t in $(FUZZ_TARGETS); do \
		mkdir -p $(B)/fuzz/corpus/$$t; \
		echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
		$(B)/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
			-artifact_prefix=$(B)/fuzz/$$t- $(B)/fuzz/corpus/$$t tests/corpus/$$t \
			2>$(B)/fuzz/$$t.log || { tail -40 $(B)/fuzz/$$t.log; exit 1; }; \
		grep -E '^stat::number_of_executed_units|^Done' $(B)/fuzz/$$t.log; \
	done
# The seeds and every saved crash input (regressions) through each target once.
fuzz-regress: deps-fuzz
	@$(MAKE) --no-print-directory $(addprefix $(B)/fuzz/,$(FUZZ_TARGETS))
	@set -e; for t in $(FUZZ_TARGETS); do $(B)/fuzz/$$t -runs=0 tests/corpus/$$t; done

gpu-tests: deps
	$(MAKE) --no-print-directory CUDA=1 all $(patsubst tests/%.c,$(B)/tests/%,$(GPU_TEST_SRCS))

# ---- install, like liburing and libfabric: PREFIX, DESTDIR ----
INSTALL ?= install
INSTALL_BINS := dataplaned ring-stat dp-bench
MAN_PAGES := $(wildcard man/*.[138])
install: all $(if $(filter 1,$(HAVE_PY)),python)
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) \
		$(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(SYSTEMDDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man8
	$(INSTALL) -m 755 $(addprefix $(B)/,$(INSTALL_BINS)) $(DESTDIR)$(BINDIR)/
	$(INSTALL) -m 755 $(LIBCLIENT_SO) $(DESTDIR)$(LIBDIR)/
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdataplane.so
	$(INSTALL) -m 644 $(LIBCLIENT_A) $(DESTDIR)$(LIBDIR)/
	$(INSTALL) -m 644 libclient/dataplane.h libclient/dp_version.h $(DESTDIR)$(INCLUDEDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
		-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' \
		-e 's|@LIBS_PRIVATE@|$(strip $(CLIENT_LIBS))|' dist/dataplane.pc.in \
		>$(DESTDIR)$(PKGCONFIGDIR)/dataplane.pc
	sed -e 's|@BINDIR@|$(BINDIR)|' dist/dataplaned.service.in \
		>$(DESTDIR)$(SYSTEMDDIR)/dataplaned.service
	for m in $(MAN_PAGES); do \
		$(INSTALL) -m 644 $$m $(DESTDIR)$(MANDIR)/man$${m##*.}/ || exit 1; \
	done
ifeq ($(HAVE_PY),1)
	$(INSTALL) -d $(DESTDIR)$(PYTHONDIR)/dataplane
	$(INSTALL) -m 644 $(filter-out $(PY_EXT),$(PY_OUT)) $(DESTDIR)$(PYTHONDIR)/dataplane/
	$(INSTALL) -m 755 $(PY_EXT) $(DESTDIR)$(PYTHONDIR)/dataplane/
else
	@echo "make install: no Python.h for $(PYTHON): the Python package is not installed" >&2
endif
# The shim needs the dataplane package importable by $(PYTHON) (make install,
# or PYTHONPATH=build/python).
install-shim-mooncake uninstall-shim-mooncake: python
	PYTHONPATH=$(abspath $(B))/python$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m dataplane.shims \
		$(if $(filter un%,$@),uninstall,install) mooncake $(if $(SHIM_TARGET),--target $(SHIM_TARGET))
uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(INSTALL_BINS)) \
		$(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libdataplane.so \
		$(DESTDIR)$(LIBDIR)/libdataplane.a $(DESTDIR)$(INCLUDEDIR)/dataplane.h \
		$(DESTDIR)$(INCLUDEDIR)/dp_version.h \
		$(DESTDIR)$(PKGCONFIGDIR)/dataplane.pc $(DESTDIR)$(SYSTEMDDIR)/dataplaned.service
	for m in $(notdir $(MAN_PAGES)); do rm -f $(DESTDIR)$(MANDIR)/man$${m##*.}/$$m; done
	rm -rf $(DESTDIR)$(PYTHONDIR)/dataplane
	-rmdir $(DESTDIR)$(PYTHONDIR) $(DESTDIR)$(LIBDIR)/python$(PY_VERSION) 2>/dev/null

# The package as a user meets it: install into a scratch DESTDIR, then build
# docs/api.md's example through `pkg-config dataplane`, dynamically and
# statically, and run both; check the exported symbols against dataplane.h,
# the header under C and C++ standards, and the unit with systemd-analyze.
check-package: all
	@tools/check-package.sh $(B)

# One name per flag (issue 47): tools/check-flags.sh says what it checks.
check-flags: $(SERVICE)
	@tools/check-flags.sh $(B)

# ---- the main job ----
run: deps
	@$(MAKE) --no-print-directory all
	@tools/run-demo.sh $(B)

# ---- benchmarks ----
bench-ring: deps-bench
	@$(MAKE) --no-print-directory $(B)/ring-bench
	$(B)/ring-bench

# The peer of P8-P10 is the CUDA runtime itself, in the same program.
bench-gpu: deps
	@$(MAKE) --no-print-directory CUDA=1 all
	tools/bench-gpu.sh $(B)

bench-local: deps-bench
	@$(MAKE) --no-print-directory all
	tools/bench-local.sh $(B)

# Memory the caller already has (dp_register_mem) vs shared regions, on the
# CPUs bench-local uses (BENCH_ARGS: e.g. --quick).
bench-vm: deps
	@$(MAKE) --no-print-directory all
	tools/bench-local.sh $(B) --no-peers $(BENCH_ARGS) vm

# Another service's export of dp_register_mem memory vs of a dp_alloc region
# (dp-bench vm-target): same host, then tcp between two network namespaces
# when run as root (BENCH_ARGS: e.g. --json; QUICK=1 for a short run).
bench-vmtarget: deps
	@$(MAKE) --no-print-directory all
	tools/bench-vmtarget.sh $(B) $(BENCH_ARGS)

# KV pages the way serving engines move them (tools/bench-serving.py): the
# C API (dp-bench serving), dataplane.mooncake and dataplane.nixl side by
# side, and the Python-side cost of posting 100 000 descriptors at once.
bench-serving: deps
	@$(MAKE) --no-print-directory all python
	$(PYTHON) tools/bench-serving.py $(B)

# First contact with an engine session (dp-bench session): one service, two
# of this host, then tcp between two network namespaces when run as root
# (BENCH_ARGS: e.g. --json; QUICK=1 for a short run).
bench-session: deps
	@$(MAKE) --no-print-directory all
	tools/bench-session.sh $(B) $(BENCH_ARGS)

# Scaling with pollers and clients, and the cost of idle queues (S1-S5):
# dp-bench scale then idle-queues, services of its own (BENCH_ARGS: e.g.
# --quick, --pollers 1,2,4,8, --service-cpus 8-15 --client-cpus 0-7,
# --plot scale.png; docs/benchmarks.md, "Scaling").
bench-scale: deps
	@$(MAKE) --no-print-directory all
	tools/bench-local.sh $(B) --no-peers $(BENCH_ARGS) scale
	tools/bench-local.sh $(B) --no-peers $(BENCH_ARGS) idle-queues
	tools/bench-local.sh $(B) $(BENCH_ARGS) stripe

# P6, P7: needs root (it creates two network namespaces joined by veth).
bench-fabric: deps-bench
	@tools/deps.sh bin:ucx_perftest=ucx-utils bin:ip=iproute2
	@$(MAKE) --no-print-directory all
	tools/bench-fabric.sh $(B)

# Rails that die, slow down and come back (issue 46): two services in two
# network namespaces joined by two veth rails, a rail cut under load
# (link down, 100% loss) and slowed to a tenth (tools/bench-failover.sh;
# docs/benchmarks.md, "Rail failover"). Needs root. QUICK=1: fewer cuts.
bench-failover: deps
	@$(MAKE) --no-print-directory all
	tools/bench-failover.sh $(B)

# The deterministic cost figure: instructions per 64 B local WRITE in the
# poller (callgrind); every change to the hot path reports it.
bench-instr: deps
	@tools/deps.sh bin:valgrind=valgrind
	@$(MAKE) --no-print-directory all $(B)/dp-instr
	tools/bench-instr.sh $(B)

# P11: the peer is fio (io_uring engine) on the same file in the same run.
bench-file: deps
	@tools/deps.sh bin:fio=fio
	@$(MAKE) --no-print-directory all
	tools/bench-file.sh $(B)

# Python vs C on one service: batch of 32 64 B WRITEs, single 64 B WRITE p50
# (tools/bench-python.sh; docs/benchmarks.md, "Python").
bench-python: deps
	@$(MAKE) --no-print-directory all python
	PYTHON=$(PYTHON) tools/bench-python.sh $(B)

# ---- formatting ----
FORMAT_SRCS = $(wildcard ring/*.[ch] libclient/*.[ch] dataplane/*.[ch] dataplane/*/*.[ch] \
	tools/*.c tests/*.[ch] tests/fuzz/*.c \
	examples/*.c libclient/python/dataplane/*.[ch])
format:
	clang-format -i $(FORMAT_SRCS)
format-check:
	clang-format --dry-run --Werror $(FORMAT_SRCS)

clean:
	rm -rf build

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
