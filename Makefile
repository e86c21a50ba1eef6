# scapforge.remediation: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Where the lab keeps its cached root, content, keys and host layers (outside the checkout).
export SCAPFORGE_LAB_HOME ?= /var/lib/scapforge-lab
LAB_HOSTS ?= 1
# make test runs the integration tests and the fault suite on this many lab hosts at once
# (pytest-xdist workers, whole test files per worker: a file's shared lab run stays on one host).
TEST_WORKERS ?= 2
PROFILE ?= xccdf_org.ssgproject.content_profile_anssi_bp28_high

.PHONY: deps venv venv-pkg lab lab-build lab-down demo test unit integration faults lint clean test-matrix mutation

# Debian packages the controller needs: Python's venv, and for the lab debootstrap,
# systemd-nspawn, tinyproxy, ssh, curl and ip; for the report.html test chromium and its driver.
deps:
	@need=""; for c in python3:python3 debootstrap:debootstrap systemd-nspawn:systemd-container tinyproxy:tinyproxy \
	  ssh:openssh-client ssh-keygen:openssh-client curl:curl ip:iproute2 dpkg-deb:dpkg \
	  chromium:chromium chromedriver:chromium-driver; do \
	  command -v $${c%%:*} >/dev/null 2>&1 || need="$$need $${c##*:}"; done; \
	$(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1 || need="$$need python3-venv"; \
	if [ -n "$$need" ]; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$need; fi

$(VENV)/.installed: requirements.txt requirements-test.txt | deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-test.txt
	touch $@

venv: $(VENV)/.installed

# The packaging and documentation tools (antsibull-docs, ansible-builder) in their own
# virtualenv: Sphinx and aiohttp come with antsibull-docs (tests/unit/test_packaging.py).
VENV_PKG ?= .venv-pkg
$(VENV_PKG)/.installed: requirements-pkg.txt | deps
	$(PYTHON) -m venv $(VENV_PKG)
	$(VENV_PKG)/bin/python -m pip install -q --upgrade pip
	$(VENV_PKG)/bin/python -m pip install -q -r requirements-pkg.txt
	touch $@

venv-pkg: $(VENV_PKG)/.installed

# The cached lab root and the pinned SCAP content (the catalog's unit tests read it too).
lab-build: deps venv
	$(PY) lab/lab.py build

lab: lab-build
	$(PY) lab/lab.py up --hosts $(LAB_HOSTS)

lab-down: venv
	$(PY) lab/lab.py down

# make demo ACCELERATE=mitogen runs the job under Mitogen for Ansible (README "Speed").
ACCELERATE ?=
ifneq ($(filter-out mitogen,$(ACCELERATE)),)
$(error ACCELERATE=$(ACCELERATE): the one accelerator is mitogen)
endif
# the hosts `make lab` booted (lab1..labN): another running lab host (a test's) is never the demo's.
DEMO_HOSTS = $(shell seq -s, -f 'lab%g' 1 $(LAB_HOSTS))
demo: lab
	$(if $(filter mitogen,$(ACCELERATE)),exports=$$($(PY) tools/accelerate.py) || exit 1; eval "$$exports";) \
	ansible-playbook playbooks/remediate.yml -i inventory/lab.yml -l $(DEMO_HOSTS) -e scapforge_profile=$(PROFILE); rc=$$?; \
	$(PY) tools/print_summary.py playbooks/scapforge-runs/latest; exit $$rc

unit: lab-build venv-pkg
	$(PY) -m pytest -q tests/unit

integration: lab-build
	$(PY) -m pytest -q tests/integration

faults: lab-build
	$(PY) -m pytest -q tests/faults

lint: venv
	ansible-lint

test: lab-build venv-pkg lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 tests/unit tests/integration tests/faults

clean: lab-down
	rm -rf $(VENV) .pytest_cache

# Opt-in, not part of `make test`: a real small model (SmolLM2-135M-Instruct, CPU, llama.cpp
# server on 127.0.0.1:8731) writes the Worker's fixes on lab1, to prove the remediation loop
# survives a model's nonsense (tools/llm_smoke.py; RULES="r1,r2" overrides its default rules).
# The server lives in its own virtualenv; building llama-cpp-python took 23 min wall on 2 busy cores
# and needs a C++ compiler and cmake.
VENV_LLM ?= .venv-llm
.PHONY: llm-smoke

$(VENV_LLM)/.installed: tools/llm-smoke-requirements.txt | deps
	@command -v c++ >/dev/null 2>&1 && command -v cmake >/dev/null 2>&1 || { apt-get update && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends build-essential cmake; }
	$(PYTHON) -m venv $(VENV_LLM)
	$(VENV_LLM)/bin/python -m pip install -q --upgrade pip
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(VENV_LLM)/bin/python -m pip install -q -r tools/llm-smoke-requirements.txt
	touch $@

llm-smoke: lab $(VENV_LLM)/.installed
	$(PY) tools/llm_smoke.py run $(if $(RULES),--rules "$(RULES)")

# Opt-in, not part of `make test` (~15 min): the unit tests, test_executor, test_remediate and test_accelerated on each supported
# ansible-core, 2.19, 2.20 and 2.21 (noxfile.py; CORES="core-2.21" picks sessions). 2.20 and
# 2.21 need Python 3.12+: lab/matrix_python.py builds Debian trixie's python3.13 once under
# $(MATRIX_HOME); nox and the sessions' virtualenvs are cached there too (outside the checkout).
MATRIX_HOME ?= $(SCAPFORGE_LAB_HOME)/matrix
MATRIX_NOX := $(MATRIX_HOME)/nox-venv

$(MATRIX_NOX)/.installed: tools/matrix-requirements.txt | deps
	$(PYTHON) -m venv $(MATRIX_NOX)
	$(MATRIX_NOX)/bin/python -m pip install -q --upgrade pip
	$(MATRIX_NOX)/bin/python -m pip install -q -r tools/matrix-requirements.txt
	touch $@

test-matrix: lab-build $(MATRIX_NOX)/.installed
	@command -v patchelf >/dev/null 2>&1 || { apt-get update && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends patchelf; }
	py313=$$(SCAPFORGE_MATRIX_HOME=$(MATRIX_HOME) $(PY) lab/matrix_python.py) && \
	py311=$$($(PY) -c 'import sys; print(sys._base_executable)') && \
	SCAPFORGE_MATRIX_HOME=$(MATRIX_HOME) SCAPFORGE_MATRIX_PYTHON313=$$py313 SCAPFORGE_MATRIX_PYTHON311=$$py311 \
	  $(MATRIX_NOX)/bin/nox --envdir $(MATRIX_HOME)/nox-envs $(if $(CORES),-s $(CORES))

# Opt-in, not part of `make test` (a few minutes): mutmut over the engine's decision modules
# (tools/mutation.py lists them with their unit tests), each in its own copy of the tree under
# .mutation/ (the checkout is never modified). Prints `mutation score: N killed of M (P %)`;
# README "Mutation testing" gives the figure and the survivors judged equivalent.
MUTATION_JOBS ?= 2
$(VENV)/.mutation-installed: tools/mutation-requirements.txt | $(VENV)/.installed
	$(PY) -m pip install -q -r tools/mutation-requirements.txt
	touch $@

mutation: $(VENV)/.mutation-installed
	$(PY) tools/mutation.py --jobs $(MUTATION_JOBS)
