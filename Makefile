# Two entry points matter: `make lab` (the main job) and `make test` (everything CI runs).
# Both set up what they need; `make setup` is idempotent.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# JAX 0.12 needs Python 3.12: take python3.12 when it really runs, else pyenv's 3.12.
PYTHON312 := $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo $$p; break; }; done)
STAMP := $(VENV)/.installed
# Mosaic GPU's compiler: XLA's CUDA plugin, compile-only (no GPU). A directory of its own, not
# site-packages, so JAX does not load it in every process; only pallaslab's worker uses it.
MGPU_DIR := $(VENV)/mosaic-gpu-compiler
MGPU_STAMP := $(MGPU_DIR)/.installed

.PHONY: setup mosaic-gpu-compiler lab test test-python test-jax011 lint browser-deps typecheck-js clean \
	device-check

setup: $(STAMP) $(MGPU_STAMP)

$(STAMP): pyproject.toml
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: install python3.12 (JAX 0.12 needs it)"; exit 1; }
	test -x $(PY) || $(PYTHON312) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[all]"
	touch $(STAMP)

# The plugin matching the installed jaxlib (--no-deps: no cuDNN/cuBLAS/cudart needed), and the
# triton wheel's ptxas/nvdisasm/libdevice linked where the plugin looks for a CUDA toolkit.
mosaic-gpu-compiler: $(MGPU_STAMP)

$(MGPU_STAMP): $(STAMP)
	v=$$($(PY) -c 'import importlib.metadata as m; print(m.version("jaxlib"))') && \
	$(PY) -m pip install --quiet --no-deps --upgrade --target $(MGPU_DIR) \
		"jax-cuda12-pjrt==$$v" "jax-cuda12-plugin==$$v"
	$(PY) -m pallaslab.lowering.mosaic_gpu_compile --install-tools $(MGPU_DIR)
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
	$(VENV)/bin/ruff check pallaslab lowering tests benchmarks
	$(VENV)/bin/mypy

# One pytest worker per core; a test file stays on one worker, so its module fixtures (the peer
# corpus's device batch, shared compiles) are made once. PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= $(shell nproc)
# Tests marked `serial` (they signal their own process) run after, in one process.
test-python: setup
	JAX_PLATFORMS=cpu $(PY) -m pytest -q $(if $(filter 0,$(PYTEST_WORKERS)),,\
		-n $(PYTEST_WORKERS) --dist loadfile -m "not serial" && \
		JAX_PLATFORMS=cpu $(PY) -m pytest -q -m serial)

# The other supported JAX (pyproject: jax>=0.11,<0.13) in a second virtualenv: the catalog's
# capture, check (findings), compare and lower tests, and the version gates' own test. JAX 0.11
# pins its libtpu through jax[tpu]; pallaslab itself comes in editable, with no extras.
JAX011_VENV := .venv-jax011
JAX011_PY := $(JAX011_VENV)/bin/python
JAX011 := 0.11.2
JAX011_STAMP := $(JAX011_VENV)/.installed
JAX011_TESTS := tests/test_jax_versions.py tests/model/test_capture.py \
	tests/analysis/test_findings.py tests/execute/test_compare.py tests/lowering/test_lowering.py

$(JAX011_STAMP): pyproject.toml Makefile
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: install python3.12"; exit 1; }
	test -x $(JAX011_PY) || $(PYTHON312) -m venv $(JAX011_VENV)
	$(JAX011_PY) -m pip install --quiet --upgrade pip
	$(JAX011_PY) -m pip install --quiet "jax[tpu]==$(JAX011)" "jaxlib==$(JAX011)" \
		-e ".[gpu]" "pytest>=8" "pytest-xdist>=3.5"
	touch $(JAX011_STAMP)

test-jax011: $(JAX011_STAMP)
	JAX_PLATFORMS=cpu $(JAX011_PY) -m pytest -q -p no:cacheprovider $(if $(filter 0,\
		$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile) $(JAX011_TESTS)

test: setup browser-deps lint typecheck-js test-python test-jax011

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
	rm -rf $(VENV) $(JAX011_VENV) .pytest_cache .mypy_cache .ruff_cache test-results
