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
PROFILE ?= xccdf_org.ssgproject.content_profile_anssi_bp28_high

.PHONY: deps venv lab lab-down demo test unit integration lint clean

# Debian packages the controller needs for the lab (debootstrap, systemd-nspawn, tinyproxy).
deps:
	@need=""; for c in debootstrap:debootstrap systemd-nspawn:systemd-container tinyproxy:tinyproxy ssh:openssh-client ssh-keygen:openssh-client curl:curl ip:iproute2; do \
	  command -v $${c%%:*} >/dev/null 2>&1 || need="$$need $${c##*:}"; done; \
	if [ -n "$$need" ]; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$need; fi

$(VENV)/.installed: requirements.txt requirements-test.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-test.txt
	touch $@

venv: $(VENV)/.installed

lab: deps venv
	$(PY) lab/lab.py up --hosts $(LAB_HOSTS)

lab-down: venv
	$(PY) lab/lab.py down

demo: lab
	ansible-playbook playbooks/remediate.yml -i inventory/lab.yml -e scapforge_profile=$(PROFILE); rc=$$?; \
	$(PY) tools/print_summary.py playbooks/scapforge-runs/latest; exit $$rc

unit: venv
	$(PY) -m pytest -q tests/unit

integration: deps venv
	$(PY) -m pytest -q tests/integration

lint: venv
	ansible-lint

test: deps venv lint
	$(PY) -m pytest -q tests/unit tests/integration

clean: lab-down
	rm -rf $(VENV) .pytest_cache
