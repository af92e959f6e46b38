# Two set-up commands on a fresh machine (Python 3.11+): `make demo` and `make test`.
# Both create the virtualenv in .venv and install what they need themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast lint typecheck docs unit dist bench bench-quick format clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,lint,bench,spark,docs]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m mtawindows.spark_connector.demo

test: lint typecheck docs unit

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# mypy sees the packages under their import names through .typecheck/ (links; see pyproject)
typecheck: $(STAMP)
	$(BIN)/mypy

# the documentation site into site/, strictly: a broken link or a stale reference fails it
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# a wheel of the package into dist/ (pip install dist/mtawindows-*.whl, or
# pip install '.[spark]' straight from a checkout)
dist: $(STAMP)
	rm -rf dist build
	$(BIN)/python -m pip wheel --no-deps --no-build-isolation -q -w dist .

unit: $(STAMP)
	$(BIN)/python -m pytest

# while working: lint, types and the tests not marked slow or spark, fewer hypothesis examples
# (about a minute); `make test` stays the whole suite
test-fast: lint typecheck
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-fast} $(BIN)/python -m pytest -m "not slow and not spark" -q

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_kvs.py
	$(BIN)/python benchmarks/bench_cluster.py

bench-quick: $(STAMP)
	$(BIN)/python benchmarks/bench_engine.py --quick
	$(BIN)/python benchmarks/bench_kvs.py --quick
	$(BIN)/python benchmarks/bench_cluster.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis site dist build
