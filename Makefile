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
DEMO_OUT ?= runs/demo

# `make recipe`: a training recipe run to its end in pieces, averaged, scored into docs/results/ (needs a GPU to be
# quick); RECIPE_ARGS="--max-pieces 1" stops after one piece (<= 8 min of training): run it again to continue.
RECIPE ?= configs/bible_es_en_paper.yaml
RECIPE_ARGS ?=

.PHONY: setup setup-dev test test-fast lint format demo bench-gpu recipe clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@if $(PYTHON) -c "import torch" 2>/dev/null; then \
		echo "setup: reusing the installed torch ($$($(PYTHON) -c 'import torch; print(torch.__version__)'))"; \
		$(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
		$(PYTHON) -m venv $(VENV) && $(BIN)/pip install -q --upgrade pip && $(BIN)/pip install -q "$(TORCH_SPEC)"; \
	fi
	$(BIN)/pip install -q -e ".[plot]"
	@touch $@

# Tests and lint also need the dev extra (pytest, ruff, and the export/TensorBoard/Moses packages their tests use);
# `make demo` does not, so its budget is not spent installing them.
setup-dev: $(VENV)/.installed-dev

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install -q -e ".[dev,plot]"
	@touch $@

test: setup-dev
	$(BIN)/python -m pytest -q

test-fast: setup-dev
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup-dev
	$(BIN)/ruff check transformer tests scripts
	$(BIN)/ruff format --check transformer tests scripts

format: setup-dev
	$(BIN)/ruff format transformer tests scripts
	$(BIN)/ruff check --fix transformer tests scripts

demo:
	@start=$$(date +%s); $(MAKE) --no-print-directory setup && \
	$(BIN)/python scripts/demo.py --config $(DEMO_CONFIG) --out $(DEMO_OUT) --budget $(DEMO_BUDGET) --started-at $$start

recipe: setup
	$(BIN)/python scripts/run_recipe.py --config $(RECIPE) $(RECIPE_ARGS)

# Every GPU training figure: base and big shapes, ours vs nn.Transformer vs HF Marian, JSON records in
# docs/results/ and the table in docs/benchmarks.md. About 5 minutes on one H100/H200; refuses to run without a GPU.
bench-gpu: setup
	$(BIN)/python scripts/bench_gpu.py

clean:
	rm -rf runs cache .pytest_cache .ruff_cache
