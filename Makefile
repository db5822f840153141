# gocl build, test and benchmark entry points. `make help` lists them.
GO      ?= go
CC      ?= gcc
BUILD   := build
SOURCES := $(shell find capi runtime abi kernels jaxffi -name '*.go' -o -name '*.c' -o -name '*.h' -o -name '*.s') go.mod runtime/version/VERSION
RPATH   := -Wl,-rpath,'$$ORIGIN'
CFLAGS  := -O2 -Wall -Wextra -I$(BUILD)/include -Icmd/gocl-perf
# Python: a uv-made .venv with gocl installed editable (extras torch, jax, test).
# Packages are installed with their bytecode compiled: uv skips that by default,
# and where PYTHONDONTWRITEBYTECODE is set (our machines) every process would
# compile torch from source again (13 s per `import torch` on 2 busy cores,
# against about 2 s), for every rank of every test.
PYTHON3 ?= python3
UV      := $(PYTHON3) -m uv
UV_READY := $(UV) --version >/dev/null 2>&1 || $(PYTHON3) -m pip install --quiet uv  # uv from PyPI when missing
export UV_COMPILE_BYTECODE := 1
VENV    := .venv
PY      := $(VENV)/bin/python
PYLIB   := python/gocl/_native/libgocl.so
PYDOCTOR := python/gocl/_native/gocl-doctor
PYPERF  := python/gocl/_native/gocl-perf
# gocl behind MPItrampoline's MPI ABI (JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi, MPITRAMPOLINE_LIB=$(gocl mpi-abi)).
PYMPIABI := python/gocl/_native/libgocl_mpiabi.so
MPIABI_SOURCES := mpiabi/gocl_mpiabi.c mpiabi/launcher_world.c mpiabi/launcher_world.h mpiabi/mpiabi_stubs.c mpiabi/mpiabi_consts.h jaxffi/memory.c jaxffi/memory.h capi/gocl.h
PERF_SOURCES := cmd/gocl-perf/gocl_perf.c cmd/gocl-perf/perf_common.c cmd/gocl-perf/perf_common.h cmd/gocl-perf/launch.c cmd/gocl-perf/launch.h capi/gocl.h
DOCTOR_SOURCES := $(shell find cmd/gocl-doctor doctor -type f 2>/dev/null) go.mod $(wildcard go.sum)

.PHONY: mpiabi-gen test-mpiabi help lib run perf test test-go test-race test-c test-python test-engines test-slurm test-lightning test-hf test-ray slurm tmux test-torch27 test-torch-upstream test-torch-upstream-short venv pylib fuzz fuzz-short test-reliability bench bench-jax bench-jax-collectives bench-jax-stress bench-heartbeat bench-scale bench-multihost bench-encrypt test-torchft torchft-short bench-torchft docs mpi clean wheels wheel-tools qemu test-sdist

help:
	@echo "make run    - set up .venv, then the main job: examples/ddp_train.py (DDP) on 4 local ranks over gocl and gloo in turn"
	@echo "make perf   - gocl-perf all_reduce on 4 processes (nccl-tests columns, results checked); gocl perf runs any collective"
	@echo "make test   - build, then every test: Go (unit, multi-process, -race), fuzz seeds, C API over 1..5 processes, Python"
	@echo "make lib    - $(BUILD)/libgocl.so and $(BUILD)/include/gocl.h"
	@echo "make venv   - $(VENV) (uv) with gocl installed editable, extras torch, jax, test; rebuilds $(PYLIB) when Go changes"
	@echo "make test-torch-upstream - torch's whole distributed suite on gloo and gocl, 2 ranks, compared in RESULTS.md (long; make test runs a subset)"
	@echo "make test-engines - the launchers and trainers for real: srun on a throwaway Slurm cluster, Lightning's Trainer.fit (own venv $(VENVPL)), Hugging Face's Trainer and Accelerate (make test-hf, own venv $(VENVHF)); make test runs them"
	@echo "make test-ray - gocl.ray: ray.util.collective backend and TorchTrainer vs gloo on a local Ray cluster, two nodes in namespaces (own venv $(VENVRAY); long)"
	@echo "make test-mpiabi - JAX's own CPU collectives over gocl's MPI ABI library (libgocl_mpiabi.so), its tests 3 times; make mpiabi-gen regenerates its stubs"
	@echo "make test-python - the Python suite (numpy API, launcher, pytest plugin, packaging, torch backend) in $(VENV)"
	@echo "make bench  - gocl vs OpenMPI allreduce side by side, 2 and 4 ranks, checked against the goals (installs OpenMPI if missing)"
	@echo "make bench-jax - gocl.jax vs JAX's gloo psum, mpi4jax (installed here over Debian's Open MPI) and gocl's numpy API, 2 processes"
	@echo "make bench-jax-collectives - jitted psum, psum_scatter, all_gather 8 B..64 MiB: gocl's MPI ABI (JAX's own collectives) vs JAX's gloo vs gocl.jax's FFI vs gocl's numpy API, 2 and 4 processes (bench/JAX_MPIABI.md)"
	@echo "make bench-jax-stress - 1000 checked psum_scatter calls on a 2x2 mesh (4 processes), gocl's MPI ABI vs JAX's gloo alternated, wrong results counted in bench/JAX_STRESS.md"
	@echo "make bench-scale - how init, memory, fds and latency grow with the ranks: 8 to 256 processes and 8 to 256 ranks as threads of 16 processes, beside torch's gloo; 64 to 4096 in-process ranks (bench/SCALE.md)"
	@echo "make bench-heartbeat - 64 processes: a stopped rank named in a call and between calls, then 10 minutes of calls, idle and busy phases under extra load without one heartbeat verdict (bench/HEARTBEAT.md)"
	@echo "make fuzz   - run each fuzz target (Go, and from_env's id exchange) for FUZZTIME (default 30s)"
	@echo "make test-torchft - gocl.torchft's tests and a short torchft run (kill, restart, heal) on gocl, gloo, babygloo; make bench-torchft: the timed run"
	@echo "make bench-multihost - gocl vs torch gloo vs OpenMPI across hosts on shaped links (network namespaces, tc tbf; root), bench/MULTIHOST.md"
	@echo "make bench-encrypt   - the cost of GOCL_SOCKET_ENCRYPT=1 on shaped links (1, 4 Gbit/s), unshaped and loopback, bench/ENCRYPT.md"
	@echo "make test-reliability - multi-host over network namespaces (also torchrun), resource hygiene over 100,000 calls, 100 kill-shrink-grow rounds (long)"
	@echo "make docs   - the docs as a site in $(BUILD)/site: README.md, docs/ and the Python API from its docstrings (mkdocs, mkdocstrings; tests/python/test_docs.py builds it)"
	@echo "make wheels - release files in $(DIST)/: the sdist and manylinux_2_17 wheels for x86_64 and aarch64, each checked"
	@echo "make test-sdist - install the sdist where PATH has no Go and no C compiler (minutes)"
	@echo "parts of make test: make test-go (vet, unit and multi-process tests; fuzz-short first), make test-race (-race -short),"
	@echo "  make test-c (the C API over 1..5 processes), make test-python, make test-engines (= make test-slurm test-lightning test-hf),"
	@echo "  make test-torch27 (the torch suite on torch 2.7.1, own venv), make test-torch-upstream-short, make torchft-short, make fuzz-short"
	@echo "setup steps they use: make pylib (the native libraries into python/gocl/_native), make mpi, make slurm, make tmux, make qemu"
	@echo "  (Debian packages, when missing), make wheel-tools (zig and the wheel checkers); make clean removes $(BUILD) and python/gocl/_native"
	@echo "make help   - this list (every target; tests/python/test_docs.py checks it)"

lib: $(BUILD)/libgocl.so $(BUILD)/include/gocl.h

# The native files, each built by its one recipe in hatch_build.py (ARTIFACTS:
# the same the wheel and the editable install build) into python/gocl/_native/,
# the folder the Python package loads from; build/ gets copies for the C tests
# and benchmarks (linked to the libgocl.so beside them: rpath $$ORIGIN).
# Each is written beside its target and renamed over it: a Python process that
# has the old one mapped keeps it instead of crashing on a rewritten file.
# gocl-doctor (NVML via go-nvml, never inside libgocl.so) and gocl-perf (the
# benchmark `gocl perf` runs) sit next to libgocl.so.
NATIVE_BUILD := $(PYTHON3) hatch_build.py
pylib: $(PYLIB) $(PYDOCTOR) $(PYPERF) $(PYMPIABI)

$(PYLIB): $(SOURCES)
	$(NATIVE_BUILD) libgocl.so

$(PYDOCTOR): $(DOCTOR_SOURCES)
	$(NATIVE_BUILD) gocl-doctor

$(PYPERF): $(PERF_SOURCES) $(PYLIB)
	$(NATIVE_BUILD) gocl-perf

$(BUILD)/libgocl.so $(BUILD)/gocl-perf: $(BUILD)/%: python/gocl/_native/%
	@mkdir -p $(BUILD)
	cp -f $< $@
$(BUILD)/gocl-perf: $(BUILD)/libgocl.so

# mpiabi/mpiabi_stubs.c and mpiabi_consts.h are generated (committed): `make mpiabi-gen`
# remakes them from MPItrampoline's tables (MPITRAMPOLINE_SRC: its source tree or git dir).
$(PYMPIABI): $(MPIABI_SOURCES) $(PYLIB)
	$(NATIVE_BUILD) libgocl_mpiabi.so

# JAX through the MPI door (gocl's MPI ABI library): its tests 3 times in a row (make test runs them once).
test-mpiabi: venv
	for i in 1 2 3; do $(PY) -m pytest tests/python/test_jax_mpi_abi.py -q || exit 1; done

MPITRAMPOLINE_SRC ?= /work/.mirror/eschnett+MPItrampoline/repo
mpiabi-gen:
	$(PYTHON3) mpiabi/gen_stubs.py $(MPITRAMPOLINE_SRC)

# uv comes from PyPI when missing; an existing .venv is reused. The editable
# install's build hook (hatch_build.py) builds $(PYLIB), $(PYDOCTOR) and $(PYPERF) too;
# their rules keep them fresh afterwards when only Go sources change.
venv: $(VENV)/.gocl-installed $(PYLIB) $(PYDOCTOR) $(PYPERF) $(PYMPIABI)

$(VENV)/.gocl-installed: pyproject.toml hatch_build.py
	@$(UV_READY)
	@test -x $(PY) || $(UV) venv --python $(PYTHON3) $(VENV)
	$(UV) pip install --python $(PY) -e ".[torch,jax,test]"
	@touch $@

$(BUILD)/include/gocl.h: capi/gocl.h
	@mkdir -p $(BUILD)/include
	cp $< $@

$(BUILD)/gocl_test: tests/c/gocl_test.c cmd/gocl-perf/launch.c cmd/gocl-perf/launch.h lib
	$(CC) $(CFLAGS) tests/c/gocl_test.c cmd/gocl-perf/launch.c -L$(BUILD) -lgocl -lm $(RPATH) -o $@

# gocl's XLA FFI handlers on hand-built call frames (no JAX needed).
$(BUILD)/jaxffi_test: tests/c/jaxffi_test.c jaxffi/xla_ffi.h lib
	$(CC) $(CFLAGS) -std=gnu11 $< -L$(BUILD) -lgocl -lpthread $(RPATH) -o $@

$(BUILD)/fork_test: tests/c/fork_test.c lib
	$(CC) $(CFLAGS) $< -L$(BUILD) -lgocl $(RPATH) -o $@

# Go's threads get their timer slack in a program linked at start-up too.
$(BUILD)/slack_test: tests/c/slack_test.c lib
	$(CC) $(CFLAGS) $< -L$(BUILD) -lgocl $(RPATH) -o $@


# The C API's cheapest call, timed (bench/compare.py's floor for its overhead).
$(BUILD)/capi-floor: bench/capi_floor.c lib
	$(CC) $(CFLAGS) $< -L$(BUILD) -lgocl $(RPATH) -o $@

$(BUILD)/env_test: tests/c/env_test.c lib
	$(CC) $(CFLAGS) $< -L$(BUILD) -lgocl -lpthread $(RPATH) -o $@

# A stand-in libnvidia-ml.so.1 (no driver needed) for libgocl's NVML reader
# (capi/nvml.c); tests/python/test_nvml_shim.py puts it on LD_LIBRARY_PATH.
FAKE_NVML := $(BUILD)/fake-nvml/libnvidia-ml.so.1
$(FAKE_NVML): tests/c/fake_nvml.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 $< -o $@

$(BUILD)/mpi-perf: bench/mpi_perf.c cmd/gocl-perf/perf_common.c cmd/gocl-perf/perf_common.h
	@command -v mpicc >/dev/null || $(MAKE) mpi
	mpicc -O2 -Wall -Icmd/gocl-perf $< cmd/gocl-perf/perf_common.c -lm -o $@

# The main job: DDP training on 4 local ranks over gocl and over gloo, in turn.
run: venv
	$(VENV)/bin/gocl run -n 4 -- $(PY) examples/ddp_train.py

# The C API's own benchmark (4 processes, results checked): nccl-tests columns.
perf: $(BUILD)/gocl-perf
	$(BUILD)/gocl-perf all_reduce -P 4 -b 8 -e 64M -f 4 -c 1

test: test-go test-race test-c test-python test-engines test-torch27 test-torch-upstream-short torchft-short

# go-nvml's header marks many NVML calls deprecated: cgo's warnings for them
# (on a fresh build cache) say nothing about gocl (hatch_build.py silences them
# for gocl-doctor the same way).
GO_NVML_QUIET := CGO_CFLAGS="$${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations"

test-go: fuzz-short
	$(GO_NVML_QUIET) $(GO) vet ./...
	$(GO_NVML_QUIET) $(GO) test -count=1 ./...
	# The communicator's collectives, failures, shrinks, grows and views again
	# on the full mesh of GOCL_RUNTIME_CONNECT=0 (-short: the smaller matrices).
	GOCL_RUNTIME_CONNECT=0 $(GO_NVML_QUIET) $(GO) test -count=1 -short -run '$(MESH_TESTS)' ./runtime/comm
MESH_TESTS := Collectives|Timeout|Mismatched|Abort|PeerFailure|Process|RecvAny|Shrink|Review|Revoke|Grow|Split|Views|Trace|Stream

# The docs as a site (mkdocs.yml): the pages are copied first, README.md as
# the home page (its links into docs/ made the site's), so that the site's
# sources are the files the repository shows.
docs: $(VENV)/.docs-installed
	rm -rf $(BUILD)/docs-src && mkdir -p $(BUILD)/docs-src
	cp docs/*.md $(BUILD)/docs-src/ && sed 's#](docs/#](#g' README.md > $(BUILD)/docs-src/index.md
	$(PY) -m mkdocs build --strict --quiet -f mkdocs.yml

$(VENV)/.docs-installed: $(VENV)/.gocl-installed
	$(UV) pip install --python $(PY) -e ".[docs]"
	@touch $@

# Each Go fuzz target briefly (make test); make fuzz runs them for FUZZTIME.
# The short run counts executions, not seconds: go1.26's coordinator can fail
# a run whose -fuzztime deadline fires mid-call on a loaded machine
# (golang/go#75804, "context deadline exceeded" with no failing input).
GO_FUZZ := FuzzDecode:./runtime/wire FuzzReadMsg:./runtime/bootstrap FuzzSettings:./runtime/config
FUZZ_SHORT ?= 20000x
fuzz-short:
	@for t in $(GO_FUZZ); do $(GO) test -run XXX -fuzz $${t%%:*} -fuzztime $(FUZZ_SHORT) $${t#*:} || exit 1; done

# The race detector is slow: -short trims the big matrices, and it covers
# what libgocl.so links (the doctor's own packages run in test-go).
test-race:
	$(GO_NVML_QUIET) $(GO) test -count=1 -race -short ./runtime/... ./capi/... ./jaxffi/... ./kernels/... ./abi/...

test-c: $(BUILD)/gocl_test $(BUILD)/fork_test $(BUILD)/slack_test $(BUILD)/env_test $(BUILD)/jaxffi_test
	$(BUILD)/fork_test
	$(BUILD)/slack_test
	$(BUILD)/env_test
	$(BUILD)/jaxffi_test
	for n in 1 2 3 4 5; do $(BUILD)/gocl_test -n $$n || exit 1; done
	$(BUILD)/gocl_test -n 3 --kill-rank 1

test-python: venv $(VENV)/.torchft-installed $(VENV)/.docs-installed $(FAKE_NVML) wheel-tools qemu mpi tmux
	$(PY) -m pytest tests/python -q

# Where users' jobs run (tests/engines): srun tasks as ranks on a throwaway
# one-host Slurm cluster (two slurmd on this host) that the tests start and
# stop (root); Lightning's Trainer.fit on 2 processes; Ray (test-ray: a few
# minutes, and Ray pins many packages) apart. Lightning and Ray get venvs of
# their own, made once, with .venv's torch.
test-engines: test-slurm test-lightning test-hf

slurm:
	command -v srun >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge)

test-slurm: venv slurm
	GOCL_REQUIRE_SLURM=1 $(PY) -m pytest tests/engines/test_slurm.py -q

TORCH_PIN = "torch==$$($(PY) -c 'import torch; print(torch.__version__.split("+")[0])')"
comma := ,
VENVPL := .venv-lightning
# engine_venv,VENV,EXTRAS: a venv of an engine's own with .venv's torch,
# numpy, pytest and gocl (editable) with EXTRAS.
define engine_venv
@test -x $(1)/bin/python || $(UV) venv --python $(PYTHON3) $(1)
$(UV) pip install --python $(1)/bin/python $(TORCH_PIN) numpy pytest -e ".[$(2)]"
@touch $@
endef

$(VENVPL)/.gocl-installed: pyproject.toml hatch_build.py $(VENV)/.gocl-installed
	$(call engine_venv,$(VENVPL),lightning)

test-lightning: $(VENVPL)/.gocl-installed $(PYLIB)
	GOCL_TEST_LIGHTNING=1 $(VENVPL)/bin/python -m pytest tests/engines/test_lightning.py -q

# Hugging Face's Trainer and Accelerate, and DeepSpeed, on 2 processes over
# gocl and gloo (tests/engines/test_hf.py), in a venv of their own with
# .venv's torch.
VENVHF := .venv-hf
$(VENVHF)/.gocl-installed: pyproject.toml hatch_build.py $(VENV)/.gocl-installed
	$(call engine_venv,$(VENVHF),hf$(comma)deepspeed)

test-hf: $(VENVHF)/.gocl-installed $(PYLIB)
	GOCL_TEST_HF=1 $(VENVHF)/bin/python -m pytest tests/engines/test_hf.py -q

VENVRAY := .venv-ray
$(VENVRAY)/.gocl-installed: pyproject.toml hatch_build.py $(VENV)/.gocl-installed
	$(call engine_venv,$(VENVRAY),ray)

test-ray: venv $(VENVRAY)/.gocl-installed $(PYLIB)
	$(VENVRAY)/bin/python -m pytest tests/engines/test_ray.py -q

# The torch backend on the oldest torch our users report (2.7.1: the
# ProcessGroup-subclass route, old method names). uv's cache makes it cheap.
VENV27 := .venv-torch27
$(VENV27)/.gocl-installed: pyproject.toml hatch_build.py
	@$(UV_READY)
	@test -x $(VENV27)/bin/python || $(UV) venv --python $(PYTHON3) $(VENV27)
	$(UV) pip install --python $(VENV27)/bin/python "torch==2.7.1" numpy pytest -e .
	@touch $@

# The 3- and 4-rank copies of the per-dtype matrices add nothing route-specific
# (make test runs them on the current torch).
test-torch27: $(VENV27)/.gocl-installed $(PYLIB)
	$(VENV27)/bin/python -m pytest tests/python/torch -q -m "not slow" -k "not 3ranks and not 4ranks"

# torch's own distributed suite (DistributedTest._DistTestBase) on gocl, 2
# ranks; tests/torch_upstream/known.txt lists what gocl skips or fails there.
# The suite needs expecttest. GOCL_UPSTREAM_BACKEND=gloo runs torch's gloo,
# GOCL_UPSTREAM_GATES=gloo also the tests gated on the gloo name.
$(VENV)/.upstream-deps: $(VENV)/.gocl-installed
	$(UV) pip install --python $(PY) expecttest
	@touch $@

# The whole suite three times (gloo; gocl under torch's gates; gocl under
# gloo's), compared: writes tests/torch_upstream/RESULTS.md, fails when a test
# gloo passes fails on gocl (about an hour on 2 cores, so not in make test).
test-torch-upstream: venv $(VENV)/.upstream-deps
	$(PY) tests/torch_upstream/report.py

test-torch-upstream-short: venv $(VENV)/.upstream-deps
	$(PY) -m pytest tests/torch_upstream -q --upstream-short

FUZZTIME ?= 30s
fuzz: venv
	@for t in $(GO_FUZZ); do $(GO) test -run XXX -fuzz $${t%%:*} -fuzztime $(FUZZTIME) $${t#*:} || exit 1; done
	GOCL_FUZZ_SECONDS=$(FUZZTIME:s=) $(PY) -m pytest tests/python/test_fuzz_from_env.py -q

# The long reliability checks: multi-host over network namespaces with
# torchrun too, resource hygiene over 100,000 calls and 1,000 inits, and 100
# kill-shrink-grow rounds (make test runs the short versions).
test-reliability: venv
	GOCL_TEST_LONG=1 $(PY) -m pytest tests/python/test_multihost.py tests/python/test_hygiene.py tests/python/test_recovery.py -q

# gocl-perf against OpenMPI's MPI_Allreduce, alternated; writes bench/RESULTS.md,
# bench/results.json (and bench/busbw.png with matplotlib). BENCH_ARGS: see
# python3 bench/compare.py --help (e.g. --ranks 2,4,8 --rounds 5).
bench: $(BUILD)/gocl-perf $(VENV)/.plot-installed
	$(PY) bench/compare.py $(BENCH_ARGS)

# Across hosts whose link is the bottleneck (bench/multihost.py: network
# namespaces, tc tbf; needs root): gocl beside torch's gloo and OpenMPI, the
# issue's three configurations at MULTIHOST_RATE, then bench/MULTIHOST.md.
# One configuration: $(PY) bench/multihost.py --hosts N --ranks-per-host K --rate R.
MULTIHOST_RATE ?= 1gbit
MULTIHOST_ARGS ?=
bench-multihost: venv mpi $(BUILD)/mpi-perf $(VENV)/.plot-installed
	flock /tmp/gocl-cpu.lock $(PY) bench/multihost.py --hosts 2 --ranks-per-host 1 --rate $(MULTIHOST_RATE) $(MULTIHOST_ARGS)
	flock /tmp/gocl-cpu.lock $(PY) bench/multihost.py --hosts 2 --ranks-per-host 2 --rate $(MULTIHOST_RATE) $(MULTIHOST_ARGS)
	flock /tmp/gocl-cpu.lock $(PY) bench/multihost.py --hosts 4 --ranks-per-host 1 --rate $(MULTIHOST_RATE) $(MULTIHOST_ARGS)
	$(PY) bench/multihost.py --assemble

# The cost of GOCL_SOCKET_ENCRYPT=1 (bench/ENCRYPT.md): gocl's all_reduce plain
# and sealed, alternated, between 2 hosts on links shaped to 1 and 4 Gbit/s and
# unshaped (bench/encrypt/), and one link both ways on loopback (go test -bench).
bench-encrypt: venv $(VENV)/.plot-installed
	flock /tmp/gocl-cpu.lock $(PY) bench/multihost.py --hosts 2 --ranks-per-host 1 --rate 1gbit --libs gocl --compare sealed=GOCL_SOCKET_ENCRYPT=1 --colls all_reduce --sizes 64K:64M --rounds 3 --out bench/encrypt
	flock /tmp/gocl-cpu.lock $(PY) bench/multihost.py --hosts 2 --ranks-per-host 1 --rate 4gbit --libs gocl --compare sealed=GOCL_SOCKET_ENCRYPT=1 --colls all_reduce --sizes 64K:64M --rounds 3 --out bench/encrypt
	flock /tmp/gocl-cpu.lock $(PY) bench/multihost.py --hosts 2 --ranks-per-host 1 --rate none --libs gocl --compare sealed=GOCL_SOCKET_ENCRYPT=1 --colls all_reduce --sizes 64K:64M --rounds 3 --out bench/encrypt
	flock /tmp/gocl-cpu.lock $(GO) test -run '^$$' -bench 'BothWays(Link|Sealed)' -count 5 ./runtime/transport/socket/

# matplotlib (the "plot" extra) for bench/busbw.png and `gocl perf --plot`.
$(VENV)/.plot-installed: $(VENV)/.gocl-installed
	$(UV) pip install --python $(PY) -e ".[plot]"
	@touch $@

# bench/jax_allreduce.py with its mpi4jax column: mpi4jax (built over
# Debian's Open MPI) goes into the venv for this benchmark only, never for
# make test. BENCH_JAX_ARGS, e.g. --lock /tmp/gocl-cpu.lock --rounds 9.
bench-jax: venv $(VENV)/.mpi4jax-installed
	$(PY) bench/jax_allreduce.py --markdown $(BENCH_JAX_ARGS)

# bench/jax_collectives.py: JAX's own psum/psum_scatter/all_gather through the
# MPI door over gocl's MPI ABI vs gloo, gocl.jax's FFI calls and the numpy API,
# 2 then 4 processes (bench/JAX_MPIABI.md). BENCH_JAX_COLL_ARGS, e.g. --rounds 9.
bench-jax-collectives: venv
	$(PY) bench/jax_collectives.py -n 2 --markdown $(BENCH_JAX_COLL_ARGS)
	$(PY) bench/jax_collectives.py -n 4 --markdown $(BENCH_JAX_COLL_ARGS)

# bench/heartbeat.py (bench/HEARTBEAT.md): a stopped rank among 64 processes
# found by the heartbeats, and 10 minutes without a false verdict.
bench-heartbeat: venv
	$(PY) bench/heartbeat.py --mode stop -n 64 --when call
	$(PY) bench/heartbeat.py --mode stop -n 64 --when idle
	$(PY) bench/heartbeat.py --mode quiet -n 64 --seconds 600 --load 2

# bench/scale.py (bench/SCALE.md): gocl's costs as ranks grow, gloo beside.
bench-scale: venv
	$(PY) bench/scale.py --procs 8,16,32,64,128,256 --inproc 64,256,1024,4096 --lazy --per-process 8:4,16:8,32:8,64:8,128:16,256:16 --markdown

# bench/jax_stress.py: psum_scatter on a 2x2 mesh over gocl's MPI ABI and over
# JAX's gloo, each result checked, wrong ones counted (bench/JAX_STRESS.md).
# BENCH_JAX_STRESS_ARGS, e.g. --calls 2000 --rounds 3.
bench-jax-stress: venv
	$(PY) bench/jax_stress.py $(BENCH_JAX_STRESS_ARGS)

$(VENV)/.mpi4jax-installed: $(VENV)/.gocl-installed
	$(MAKE) mpi
	$(UV) pip install --python $(PY) mpi4jax
	@touch $@

# torchft (the "torchft" extra, which make venv does not install; make test does,
# so tests/python/test_torchft.py runs in test-python): torchft-short is
# bench/torchft_recovery.py's short run (the lighthouse, 2 replicas, one killed and
# restarted, on gocl, gloo and babygloo; it fails unless every replica heals and ends
# with equal parameters); bench-torchft is the timed run behind bench/TORCHFT_RESULTS.md,
# under the shared CPU lock.
test-torchft: venv $(VENV)/.torchft-installed torchft-short
	$(PY) -m pytest tests/python/test_torchft.py -q

torchft-short: venv $(VENV)/.torchft-installed
	$(PY) bench/torchft_recovery.py --short

bench-torchft: venv $(VENV)/.torchft-installed
	flock /tmp/gocl-cpu.lock $(PY) bench/torchft_recovery.py $(BENCH_TORCHFT_ARGS)

$(VENV)/.torchft-installed: $(VENV)/.gocl-installed
	$(UV) pip install --python $(PY) -e ".[torchft]"
	@touch $@

# tmux: test_top.py drives gocl top in it as a person would.
tmux:
	command -v tmux >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tmux)

# OpenMPI, the anchor the benchmarks compare against (Debian's packages).
mpi:
	command -v mpicc >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev)

# Release files (docs/RELEASING.md): the sdist, and one wheel per platform,
# cross-compiled on this machine (Go's GOARCH, cgo through zig cc from PyPI,
# aimed at glibc 2.17: hatch_build.py), then checked by packaging/check_wheel.py
# (architecture, needed libraries, glibc symbol versions, exported API,
# auditwheel show).
DIST := dist
VERSION := $(shell cat runtime/version/VERSION)
WHEEL_PLATFORMS := manylinux_2_17_x86_64 manylinux_2_17_aarch64
WHEEL_TOOLS := $(BUILD)/wheel-tools
WHEEL_FILES := $(foreach p,$(WHEEL_PLATFORMS),$(DIST)/gocl-$(VERSION)-py3-none-$(p).whl)
SDIST := $(DIST)/gocl-$(VERSION).tar.gz
# What goes into a wheel: rebuilt only when one of these changes.
PACKAGE_INPUTS := $(SOURCES) $(DOCTOR_SOURCES) $(filter-out python/gocl/_version.py,$(shell find python/gocl -name '*.py')) pyproject.toml \
	hatch_build.py README.md $(wildcard packaging/*.py packaging/*.c) $(MPIABI_SOURCES)
wheels: $(SDIST) $(WHEEL_FILES) wheel-tools
	$(WHEEL_TOOLS)/bin/python packaging/check_wheel.py $(WHEEL_FILES)

$(DIST)/gocl-$(VERSION)-py3-none-%.whl: $(PACKAGE_INPUTS)
	GOCL_WHEEL_PLATFORM=$* $(UV) build --wheel --out-dir $(DIST)

$(SDIST): $(PACKAGE_INPUTS)
	$(UV) build --sdist --out-dir $(DIST)

# The sdist on a machine with nothing but Python (Go and zig from PyPI, Go
# modules from its vendor/): minutes, so not part of `make test`.
test-sdist: venv wheel-tools
	GOCL_TEST_SDIST=1 $(PY) -m pytest tests/python/test_wheels.py -q -k sdist

# auditwheel (and pyelftools, which it brings) for the checks, and zig (ziglang)
# to build tests/python/test_wheels.py's aarch64 probe, in their own venv.
wheel-tools: $(WHEEL_TOOLS)/.installed
$(WHEEL_TOOLS)/.installed:
	@$(UV_READY)
	$(UV) venv --allow-existing --python $(PYTHON3) $(WHEEL_TOOLS)
	$(UV) pip install --python $(WHEEL_TOOLS)/bin/python "auditwheel>=6" pyelftools "ziglang>=0.13"
	@touch $@

# qemu-user and Debian's aarch64 glibc: tests/python/test_wheels.py runs the
# aarch64 wheel's library under emulation when these are here.
qemu:
	@command -v qemu-aarch64 >/dev/null && test -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user libc6-arm64-cross) || \
	  echo "make qemu: qemu-user not installed; the aarch64 wheel is checked without emulation"

clean:
	rm -rf $(BUILD) python/gocl/_native
