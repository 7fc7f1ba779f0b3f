# The README's two commands: `make demo` and `make test`. Both set the project up first when .venv is missing.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# This machine's torch is the CPU wheel on disk (pip finds torch==2.13.0 there). On a GPU machine, install your
# CUDA build of torch first: setup then reuses it (the venv sees the system's packages) instead of pinning.
TORCH_SPEC ?= torch==2.13.0
# `make demo` finishes within DEMO_BUDGET in all, counted from before setup: training gets what is left.
DEMO_BUDGET ?= 15m
DEMO_CONFIG ?= configs/demo.yaml
# trained instead of DEMO_CONFIG on a machine where DEMO_CONFIG would make too few updates (scripts/demo.py)
DEMO_SMALL_CONFIG ?= configs/demo_small.yaml
DEMO_OUT ?= runs/demo

# `make recipe`: a training recipe run to its end in pieces, averaged, scored into docs/results/ (needs a GPU to be
# quick); RECIPE_ARGS="--max-pieces 1" stops after one piece (<= 8 min of training): run it again to continue.
RECIPE ?= configs/bible_es_en_paper.yaml
RECIPE_ARGS ?=

# `make gpu-check` and `make gpu-report` (docs/gpu.md): on a lent GPU machine without the venv, run them with that
# machine's Python, GPU_PYTHON=python3; GPU_BUDGET bounds one call of gpu-report's steps (7m: with start-up and the
# last step's grace, an 8-minute command; the rest waits for the next call); GPU_COMMIT is only written into the
# records (no git there: scripts/gpu_report.py --print-commit prints it here); skipping goes by each step's stamp.
GPU_PYTHON ?= $(BIN)/python
GPU_COMMIT ?=
GPU_BUDGET ?= 7m
GPU_ARGS ?=
GPU_SETUP := $(if $(filter $(BIN)/python,$(GPU_PYTHON)),setup)
GPU_COMMIT_ARG := $(if $(GPU_COMMIT),--commit $(GPU_COMMIT))

# pip installs without compiling every module to bytecode (PIP = pip --no-compile): Python compiles what is imported
# at its first import and keeps it in .venv, which needs bytecode writing on here. Setup then takes half the CPU
# (torch and the demo's packages: 30 s against 56 on an idle 2-core Zen 4), and `make demo` counts setup.
PIP = $(BIN)/pip install -q --no-compile
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup setup-dev test test-fast test-tf4 lint format demo bench-gpu recipe gpu-check gpu-report clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@if $(PYTHON) -c "import torch" 2>/dev/null; then \
		echo "setup: reusing the installed torch ($$($(PYTHON) -c 'import torch; print(torch.__version__)'))"; \
		$(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
		$(PYTHON) -m venv $(VENV) && $(PIP) --upgrade pip && $(PIP) "$(TORCH_SPEC)"; \
	fi
	$(PIP) -e ".[plot,documents]"
	@touch $@

# Tests and lint also need the dev extra (pytest, ruff, and the export/TensorBoard/Moses packages their tests use);
# `make demo` does not, so its budget is not spent installing them.
setup-dev: $(VENV)/.installed-dev

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) -e ".[dev,plot,documents]"
	@touch $@

# Two test files at a time (pytest-xdist, one worker per core; a file stays on one worker, so its module fixtures are
# built once): most tests run on one thread (tests/conftest.py), and CI's 2 cores would otherwise idle one.
PYTEST = $(BIN)/python -m pytest -q -n auto --dist loadfile

test: setup-dev
	$(PYTEST)

test-fast: setup-dev
	$(PYTEST) -m "not slow"

# The Hugging Face export and import tests against transformers 4.x (the dev extra has 5.x): a venv of its own,
# TF4_VENV, holding only transformers 4.x and seeing the dev venv's other packages. Measured on 2 shared CPU cores:
# about 45 s to install transformers 4.57.6 the first time, then about 50 s for the tests (export and import).
TF4_VENV ?= .venv-tf4
TF4_SPEC ?= transformers>=4.40,<5
test-tf4: setup-dev
	@test -x $(TF4_VENV)/bin/python || $(PYTHON) -m venv --system-site-packages $(TF4_VENV)
	@$(TF4_VENV)/bin/python -c "import site, sys; open(site.getsitepackages()[0] + '/zz_dev_venv.pth', 'w').write('import site; site.addsitedir(%r)\n' % sys.argv[1])" "$$($(BIN)/python -c 'import site; print(site.getsitepackages()[0])')"
	$(TF4_VENV)/bin/pip install -q "$(TF4_SPEC)"
	$(TF4_VENV)/bin/python -c "import transformers; print('transformers', transformers.__version__)"
	$(TF4_VENV)/bin/python -m pytest -q tests/test_export.py tests/test_hf_import.py

lint: setup-dev
	$(BIN)/ruff check transformer tests scripts
	$(BIN)/ruff format --check transformer tests scripts

format: setup-dev
	$(BIN)/ruff format transformer tests scripts
	$(BIN)/ruff check --fix transformer tests scripts

demo:
	@start=$$(date +%s); $(MAKE) --no-print-directory setup && \
	$(BIN)/python scripts/demo.py --config $(DEMO_CONFIG) --small-config $(DEMO_SMALL_CONFIG) --out $(DEMO_OUT) \
		--budget $(DEMO_BUDGET) --started-at $$start

recipe: setup
	$(BIN)/python scripts/run_recipe.py --config $(RECIPE) $(RECIPE_ARGS)

# Every GPU training figure: base and big shapes, ours vs nn.Transformer vs HF Marian, JSON records in
# docs/results/ and the table in docs/benchmarks.md. About 5 minutes on one H100/H200; refuses to run without a GPU.
bench-gpu: setup
	$(BIN)/python scripts/bench_gpu.py

# Every CUDA path once on a tiny model, one PASS/FAIL/SKIP line each (about 4 minutes on one GPU, estimated); without
# CUDA it says so in one line and exits 0. GPU_ARGS=--cpu-smoke runs the same checks on the CPU.
gpu-check: $(GPU_SETUP)
	PYTHONPATH=.$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) scripts/gpu_check.py $(GPU_COMMIT_ARG) $(GPU_ARGS)

# Every GPU figure in priority order (gpu-check, bench-gpu, the decode report, a piece of each Bible recipe) within
# GPU_BUDGET, each step capped and recorded in docs/results/gpu/; run it again to go on where it stopped.
gpu-report: $(GPU_SETUP)
	PYTHONPATH=.$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) scripts/gpu_report.py --budget $(GPU_BUDGET) $(GPU_COMMIT_ARG) $(GPU_ARGS)

clean:
	rm -rf runs cache .pytest_cache .ruff_cache
