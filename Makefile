# gocl build, test and benchmark entry points. `make help` lists them.
GO      ?= go
CC      ?= gcc
BUILD   := build
SOURCES := $(shell find capi runtime kernels -name '*.go' -o -name '*.c' -o -name '*.h') go.mod
RPATH   := -Wl,-rpath,'$$ORIGIN'
CFLAGS  := -O2 -Wall -Wextra -I$(BUILD)/include -Itests/c
# Python: a uv-made .venv with gocl installed editable (extras torch, jax, test).
PYTHON3 ?= python3
UV      := $(PYTHON3) -m uv
VENV    := .venv
PY      := $(VENV)/bin/python
PYLIB   := python/gocl/_native/libgocl.so
PYDOCTOR := python/gocl/_native/gocl-doctor
DOCTOR_SOURCES := $(shell find cmd/gocl-doctor doctor -type f 2>/dev/null) go.mod $(wildcard go.sum)

.PHONY: help lib run perf test test-go test-race test-c test-python test-torch27 test-torch-upstream test-torch-upstream-short venv pylib fuzz bench mpi clean

help:
	@echo "make run    - set up .venv, then the main job: examples/ddp_train.py (DDP) on 4 local ranks over gocl, then gloo"
	@echo "make perf   - the C API's 4-rank allreduce benchmark (nccl-tests columns, results checked)"
	@echo "make test   - build, then every test: Go (unit, multi-process, -race), fuzz seeds, C API over 1..5 processes, Python"
	@echo "make lib    - $(BUILD)/libgocl.so and $(BUILD)/include/gocl.h"
	@echo "make venv   - $(VENV) (uv) with gocl installed editable, extras torch, jax, test; rebuilds $(PYLIB) when Go changes"
	@echo "make test-torch-upstream - torch's own distributed test suite on gocl, 2 ranks (long; make test runs a subset)"
	@echo "make test-python - the Python suite (numpy API, launcher, pytest plugin, packaging, torch backend) in $(VENV)"
	@echo "make bench  - gocl vs OpenMPI allreduce side by side (installs OpenMPI from Debian if missing)"
	@echo "make fuzz   - run each fuzz target for FUZZTIME (default 30s)"

lib: $(BUILD)/libgocl.so $(BUILD)/include/gocl.h

$(BUILD)/libgocl.so: $(SOURCES)
	@mkdir -p $(BUILD)
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -trimpath -o $@ ./capi
	@rm -f $(BUILD)/libgocl.h  # cgo's generated header is internal; gocl.h is the API

# The library the Python package loads (python/gocl/_native/, a build output).
# Built beside it and renamed over it: a Python process that has the old one
# mapped keeps it instead of crashing on a rewritten file.
# gocl-doctor (NVML via go-nvml, never inside libgocl.so) sits next to it.
pylib: $(PYLIB) $(PYDOCTOR)

$(PYLIB): $(SOURCES)
	@mkdir -p $(@D)
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -trimpath -o $(@D)/.tmp-libgocl.so ./capi
	@rm -f $(@D)/.tmp-libgocl.h
	@mv -f $(@D)/.tmp-libgocl.so $@

$(PYDOCTOR): $(DOCTOR_SOURCES)
	@mkdir -p $(@D)
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" $(GO) build -trimpath -o $(@D)/.tmp-gocl-doctor ./cmd/gocl-doctor
	@mv -f $(@D)/.tmp-gocl-doctor $@

# uv comes from PyPI when missing; an existing .venv is reused. The editable
# install's build hook (hatch_build.py) builds $(PYLIB) and $(PYDOCTOR) too;
# their rules keep them fresh afterwards when only Go sources change.
venv: $(VENV)/.gocl-installed $(PYLIB) $(PYDOCTOR)

$(VENV)/.gocl-installed: pyproject.toml hatch_build.py
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON3) -m pip install --quiet uv
	@test -x $(PY) || $(UV) venv --python $(PYTHON3) $(VENV)
	$(UV) pip install --python $(PY) -e ".[torch,jax,test]"
	@touch $@

$(BUILD)/include/gocl.h: capi/gocl.h
	@mkdir -p $(BUILD)/include
	cp $< $@

$(BUILD)/gocl_test: tests/c/gocl_test.c tests/c/launch.c tests/c/launch.h lib
	$(CC) $(CFLAGS) tests/c/gocl_test.c tests/c/launch.c -L$(BUILD) -lgocl -lm $(RPATH) -o $@

$(BUILD)/fork_test: tests/c/fork_test.c lib
	$(CC) $(CFLAGS) $< -L$(BUILD) -lgocl $(RPATH) -o $@

$(BUILD)/allreduce_perf: bench/allreduce_perf.c tests/c/launch.c tests/c/launch.h lib
	$(CC) $(CFLAGS) bench/allreduce_perf.c tests/c/launch.c -L$(BUILD) -lgocl $(RPATH) -o $@

# A stand-in libnvidia-ml.so.1 (no driver needed) for libgocl's NVML reader
# (capi/nvml.c); tests/python/test_nvml_shim.py puts it on LD_LIBRARY_PATH.
FAKE_NVML := $(BUILD)/fake-nvml/libnvidia-ml.so.1
$(FAKE_NVML): tests/c/fake_nvml.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 $< -o $@

$(BUILD)/mpi_allreduce_perf: bench/mpi_allreduce_perf.c
	@command -v mpicc >/dev/null || $(MAKE) mpi
	mpicc -O2 $< -o $@

# The main job: DDP training on 4 local ranks over gocl, then over gloo.
run: venv
	$(VENV)/bin/gocl run -n 4 -- $(PY) examples/ddp_train.py

# The C API's own benchmark (4 ranks, results checked): nccl-tests columns.
perf: $(BUILD)/allreduce_perf
	$(BUILD)/allreduce_perf -n 4 -b 8 -e 64M -f 4 -c 1

test: test-go test-race test-c test-python test-torch27 test-torch-upstream-short

test-go:
	$(GO) vet ./...
	$(GO) test -count=1 ./...

# The race detector is slow; -short trims the big matrices.
test-race:
	$(GO) test -count=1 -race -short ./...

test-c: $(BUILD)/gocl_test $(BUILD)/fork_test
	$(BUILD)/fork_test
	for n in 1 2 3 4 5; do $(BUILD)/gocl_test -n $$n || exit 1; done
	$(BUILD)/gocl_test -n 3 --kill-rank 1

test-python: venv $(FAKE_NVML)
	$(PY) -m pytest tests/python -q

# The torch backend on the oldest torch our users report (2.7.1: the
# ProcessGroup-subclass route, old method names). uv's cache makes it cheap.
VENV27 := .venv-torch27
$(VENV27)/.gocl-installed: pyproject.toml hatch_build.py
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON3) -m pip install --quiet uv
	@test -x $(VENV27)/bin/python || $(UV) venv --python $(PYTHON3) $(VENV27)
	$(UV) pip install --python $(VENV27)/bin/python "torch==2.7.1" numpy pytest -e .
	@touch $@

test-torch27: $(VENV27)/.gocl-installed $(PYLIB)
	$(VENV27)/bin/python -m pytest tests/python/torch -q -m "not slow"

# torch's own distributed suite (DistributedTest._DistTestBase) on gocl, 2
# ranks; tests/torch_upstream/known.txt lists what gocl skips or fails there.
# The suite needs expecttest. GOCL_UPSTREAM_BACKEND=gloo runs torch's gloo,
# GOCL_UPSTREAM_GATES=gloo also the tests gated on the gloo name.
$(VENV)/.upstream-deps: $(VENV)/.gocl-installed
	$(UV) pip install --python $(PY) expecttest
	@touch $@

test-torch-upstream: venv $(VENV)/.upstream-deps
	$(PY) -m pytest tests/torch_upstream -q

test-torch-upstream-short: venv $(VENV)/.upstream-deps
	$(PY) -m pytest tests/torch_upstream -q --upstream-short

FUZZTIME ?= 30s
fuzz:
	$(GO) test -run XXX -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./runtime/wire
	$(GO) test -run XXX -fuzz FuzzReadMsg -fuzztime $(FUZZTIME) ./runtime/bootstrap

bench: $(BUILD)/allreduce_perf $(BUILD)/mpi_allreduce_perf
	bash bench/compare.sh

# OpenMPI, the anchor the benchmarks compare against (Debian's packages).
mpi:
	command -v mpicc >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev)

clean:
	rm -rf $(BUILD) python/gocl/_native
