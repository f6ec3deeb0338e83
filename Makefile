# Two entry points matter: `make lab` (the main job) and `make test` (everything CI runs).
# Both set up what they need; `make setup` is idempotent.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# JAX 0.12 needs Python 3.12: take python3.12 when it really runs, else pyenv's 3.12.
PYTHON312 := $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo $$p; break; }; done)
STAMP := $(VENV)/.installed
# The exact set the suite passes with (a pip constraints file): every install goes through it.
PINS := pins.txt
# Mosaic GPU's compiler: XLA's CUDA plugin, compile-only (no GPU). A directory of its own, not
# site-packages, so JAX does not load it in every process; only pallaslab's worker uses it.
MGPU_DIR := $(VENV)/mosaic-gpu-compiler
MGPU_STAMP := $(MGPU_DIR)/.installed

.PHONY: setup mosaic-gpu-compiler lab test test-python test-jax-releases test-jax-latest pins lint \
	browser-deps typecheck-js clean device-check fuzz

setup: $(STAMP) $(MGPU_STAMP)

$(STAMP): pyproject.toml $(PINS)
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: install python3.12 (JAX 0.12 needs it)"; exit 1; }
	test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c $(PINS) -e ".[all]"
	touch $(STAMP)

# XLA's CUDA plugin matching the installed jaxlib (CUDA 12 up to jaxlib 0.12.0.x, CUDA 13 from
# 0.12.1; --no-deps: no cuDNN/cuBLAS/cudart needed), as pinned, and the triton wheel's ptxas of
# that CUDA, nvdisasm and libdevice linked where the plugin looks for a CUDA toolkit.
mosaic-gpu-compiler: $(MGPU_STAMP)

$(MGPU_STAMP): $(STAMP) $(PINS)
	$(PY) -m pallaslab.lowering.mosaic_gpu_compile --install $(MGPU_DIR) --constraints $(PINS) --quiet
	touch $(MGPU_STAMP)

# Debian's Chromium for the browser tests (never a downloaded browser build).
# Node (Debian's) only type-checks the widgets' ES modules (tsc --checkJs); they need no build.
browser-deps: extension/node_modules/.package-lock.json
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

extension/node_modules/.package-lock.json: extension/package-lock.json
	@command -v npm >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }
	cd extension && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The widgets' ES modules: JSDoc types checked by TypeScript.
typecheck-js: extension/node_modules/.package-lock.json
	cd extension && npx --no-install tsc -p tsconfig.json

# Jupyter refuses to run as root unless told (CI machines and containers run as root).
# JupyterLab opens lab/, a git-ignored copy of notebooks/: running a tutorial saves its outputs
# there, never into the repository. Tutorials missing from lab/ are copied in; your edits stay.
LAB_DIR := lab
lab: setup
	@mkdir -p $(LAB_DIR) && cp -Rn notebooks/. $(LAB_DIR)/ && \
	echo "make lab: working on copies of the tutorials in $(LAB_DIR)/ (git-ignored)"
	JAX_PLATFORMS=cpu $(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_DIR)/

lint: setup
	$(VENV)/bin/ruff check pallaslab lowering tests benchmarks tools
	$(VENV)/bin/mypy

# One pytest worker per core; a test file stays on one worker, so its module fixtures (the peer
# corpus's device batch, shared compiles) are made once. PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= $(shell nproc)
# Tests marked `serial` (they signal their own process) run after, in one process.
test-python: setup
	JAX_PLATFORMS=cpu $(PY) -m pytest -q $(if $(filter 0,$(PYTEST_WORKERS)),,\
		-n $(PYTEST_WORKERS) --dist loadfile -m "not serial" && \
		JAX_PLATFORMS=cpu $(PY) -m pytest -q -m serial)

# The other tested JAX releases (pins.txt's `also-tested:` lines), each in a virtualenv of its
# own: the catalog's capture, check (findings), compare and lower tests, the version gates'
# own test, and the rewrites of kernel bodies that read JAX's internals most closely (views and
# masked stores, remote copies, explicit roundings: each found a release's own gap). Each installs its line's jax, jaxlib and libtpu, everything else as pinned (less
# pins.txt's own jax, jaxlib and libtpu), and pallaslab editable with the gpu extra.
OTHER_JAX := $(shell sed -n 's/^\# also-tested: jax==\([^ ]*\) .*/\1/p' $(PINS))
RELEASE_TESTS := tests/test_jax_versions.py tests/test_pins.py tests/model/test_capture.py \
	tests/analysis/test_findings.py tests/execute/test_compare.py tests/lowering/test_lowering.py \
	tests/execute/test_ref_views.py tests/execute/test_cross_call_remote_copies.py \
	tests/execute/test_fuzz_found_executors.py
PYTEST_PARALLEL = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

.venv-jax-%/.installed: pyproject.toml $(PINS)
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: install python3.12"; exit 1; }
	@grep -q "^# also-tested: jax==$* " $(PINS) || { echo "pins.txt tests no JAX $*"; exit 1; }
	test -x .venv-jax-$*/bin/python || $(PYTHON312) -m venv .venv-jax-$*
	.venv-jax-$*/bin/python -m pip install --quiet --upgrade pip
	grep -vE '^(jax|jaxlib|libtpu)==' $(PINS) > .venv-jax-$*/constraints.txt
	.venv-jax-$*/bin/python -m pip install --quiet -c .venv-jax-$*/constraints.txt \
		$$(sed -n 's/^# also-tested: //p' $(PINS) | grep "^jax==$* ") -e ".[gpu]" pytest pytest-xdist
	touch $@

test-jax-releases: $(foreach v,$(OTHER_JAX),.venv-jax-$(v)/.installed)
	@for v in $(OTHER_JAX); do echo "make test-jax-releases: JAX $$v"; \
		JAX_PLATFORMS=cpu .venv-jax-$$v/bin/python -m pytest -q -p no:cacheprovider \
			$(PYTEST_PARALLEL) $(RELEASE_TESTS) || exit 1; done

# The canary (not part of `make test`): the newest jax/jaxlib the registry serves, with the
# libtpu and CUDA plugin it asks for where they exist, in a fresh .venv-jax-latest; runs the
# release tests there and prints one line per failure and a summary line.
test-jax-latest:
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: install python3.12"; exit 1; }
	$(PYTHON312) tools/jax_canary.py --venv .venv-jax-latest --pins $(PINS) -- \
		$(PYTEST_PARALLEL) $(RELEASE_TESTS)

# pins.txt's pinned lines from the development virtualenv, after a passing `make test` on it.
pins: setup
	$(PY) tools/jax_canary.py --refresh-pins $(PINS)

test: setup browser-deps lint typecheck-js test-python test-jax-releases

# On a machine with an NVIDIA GPU and a CUDA-enabled JAX already installed (nothing is installed
# here): the GPU catalog on the device beside the interpreters, profiled; results in
# DEVICE_CHECK_DIR (summary.json, traces/). The Python: the venv's when its JAX sees a GPU, else
# the system's python3 when it has JAX, else the venv's (which then says "no GPU", exit 3).
DEVICE_CHECK_DIR ?= test-results/device-check
device-check:
	@py=python3; \
	if [ -x $(PY) ] && JAX_PLATFORMS=cuda $(PY) -c 'import jax; assert jax.devices()' >/dev/null 2>&1; then py=$(PY); \
	elif ! python3 -c 'import jax' >/dev/null 2>&1 && [ -x $(PY) ]; then py=$(PY); fi; \
	echo "make device-check: $$py, results in $(DEVICE_CHECK_DIR)"; \
	PYTHONPATH=.$${PYTHONPATH:+:$$PYTHONPATH} $$py -m pallaslab.device_check --out $(DEVICE_CHECK_DIR)

clean:
	rm -rf $(VENV) .venv-jax-* .pytest_cache .mypy_cache .ruff_cache test-results

# The differential fuzzer (tests/fuzz): generated kernels judged against plain JAX and a NumPy
# model for FUZZ_SECONDS, FUZZ_JOBS processes at once; failing kernels are written as case files
# to test-results/fuzz/. FUZZ_ARGS passes more (e.g. --max-kernels 10000, --families tpu-dma).
FUZZ_SECONDS ?= 120
FUZZ_SEED ?= 0
FUZZ_JOBS ?= 1
fuzz: setup
	JAX_PLATFORMS=cpu PYTHONPATH=tests $(PY) -m fuzz --seconds $(FUZZ_SECONDS) --seed $(FUZZ_SEED) \
		--jobs $(FUZZ_JOBS) $(FUZZ_ARGS)
