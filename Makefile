# Every target is self-sufficient on a fresh machine: it creates .venv, installs the pinned CPU
# build of torch first (an unpinned torch would pull a multi-GB CUDA build), then attnmt.

VENV    ?= .venv
PYTHON  ?= python3
TORCH   ?= torch==2.13.0
PY      := $(VENV)/bin/python
ATTNMT  := $(VENV)/bin/attnmt
# Use the shared data folder beside the project when it is there (no download needed).
SHARED_DATA := $(abspath ../shared/data)
export ATTNMT_DATA_DIR ?= $(if $(wildcard $(SHARED_DATA)/multi30k),$(SHARED_DATA),)

.PHONY: install demo test lint bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

# DEMO_ARGS="--out /tmp/tour --minutes 15" make demo
demo: install
	$(ATTNMT) demo $(DEMO_ARGS)

test: install
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check attnmt tests benchmarks scripts examples
	$(VENV)/bin/mypy

bench: install
	$(PY) benchmarks/attention.py
	$(PY) benchmarks/training_speed.py
	$(PY) benchmarks/decoding.py

clean:
	rm -rf $(VENV) build *.egg-info
