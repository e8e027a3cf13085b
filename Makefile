# gpu-tenancy: `make up` deploys the dev stack, `make test` runs the offline suite.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

## STACK=dev          the stack up, preview, destroy, validate, render, policy, kubeconfig, tools and preflight use
## PYTHON=python3     the interpreter the virtualenv is made with (3.11+), e.g. make up PYTHON=python3.12
## UP_FLAGS=--yes     pulumi flags of up and destroy: neither prompts; make destroy UP_FLAGS= asks first
## TENANT=<name>      the tenant make kubeconfig prints the kubeconfig of
## INOTIFY_CHECK=fail  below the README's inotify limits make up stops; =warn only warns
## VALIDATE_FLAGS=    extra tools.validate flags of make validate, e.g. --report validation-report.md
PYTHON ?= python3
STACK ?= dev
VENV := .venv
TOOLS := .tools
# Host tool versions are pinned in gpu_tenancy/versions.py with everything else. Without $(PYTHON)
# they stay empty and the recipes that need them say so once (no "command not found" at parse time).
PYTHON_FOUND := $(shell command -v $(PYTHON) 2>/dev/null)
ifneq ($(PYTHON_FOUND),)
KIND_VERSION := $(shell $(PYTHON) -c 'from gpu_tenancy.versions import KIND_VERSION; print(KIND_VERSION)' 2>/dev/null)
PULUMI_VERSION := $(shell $(PYTHON) -c 'from gpu_tenancy.versions import PULUMI_CLI_VERSION; print(PULUMI_CLI_VERSION)' 2>/dev/null)
endif
# The README's Prerequisites: `make up` stops below these inotify limits (Linux only; INOTIFY_CHECK=warn goes on).
INOTIFY_MAX_USER_INSTANCES := 1024
INOTIFY_MAX_USER_WATCHES := 524288
INOTIFY_DIR ?= /proc/sys/fs/inotify
INOTIFY_CHECK ?= fail
# kind and pulumi from .tools/bin when the host has none; the program's commands inherit this PATH.
export PATH := $(CURDIR)/$(TOOLS)/bin:$(CURDIR)/$(VENV)/bin:$(PATH)
UP_FLAGS ?= --yes
PULUMI := scripts/pulumi-env.sh $(STACK) pulumi
# up and preview would create a stack with the default config for a mistyped STACK: they stop here,
# before the virtualenv, the Docker checks or the stack are made (destroy, validate and kubeconfig
# need an existing stack anyway, and one whose config file is gone can still be destroyed).
ifneq ($(filter up preview,$(MAKECMDGOALS)),)
ifeq ($(wildcard Pulumi.$(notdir $(STACK)).yaml),)
$(error no Pulumi.$(notdir $(STACK)).yaml in this project: check STACK, or create the stack's config first (e.g. cp Pulumi.dev.yaml Pulumi.$(notdir $(STACK)).yaml, or scripts/pulumi-env.sh $(STACK) pulumi config set ...))
endif
endif

.PHONY: help preflight venv tools up preview destroy kubeconfig test lint render policy validate clean

help: ## Show the targets and the variables they read.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / { printf "  %-11s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
	@echo "Variables (make <target> NAME=value):"
	@sed -n 's/^## /  /p' $(MAKEFILE_LIST)

# One message when $(PYTHON) is missing or too old, naming the version found.
$(VENV)/.installed: requirements.txt requirements-dev.txt policies/requirements.txt
	@[ -n "$(PYTHON_FOUND)" ] || { echo "$(PYTHON) not found: install Python 3.11+ or name one, e.g. make up PYTHON=python3.12" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "Python 3.11+ is required; $(PYTHON) is $$($(PYTHON) -c 'import platform; print(platform.python_version())' 2>&1 || true): name another, e.g. make up PYTHON=python3.12" >&2; exit 1; }
	@# All on stderr: make render and make policy may make the virtualenv first, and their stdout is their output.
	@echo "creating $(VENV) with $(PYTHON) and installing requirements-dev.txt" >&2
	@$(PYTHON) -m venv $(VENV) >&2
	@$(VENV)/bin/pip install --quiet --upgrade pip >&2
	@$(VENV)/bin/pip install --quiet -r requirements-dev.txt >&2
	@touch $@

venv: $(VENV)/.installed ## Create the virtualenv with every requirement.

# After the virtualenv, which reads the stack to tell whether it needs kind at all.
tools: venv ## Fetch kind (if the stack uses it) and the Pulumi CLI into .tools/bin unless those on PATH fit the pins.
	@[ -n "$(KIND_VERSION)" ] && [ -n "$(PULUMI_VERSION)" ] || { echo "could not read the pinned versions from gpu_tenancy/versions.py with $(PYTHON) (Python 3.11+; e.g. make up PYTHON=python3.12)" >&2; exit 1; }
	@kind=$(KIND_VERSION); uses=0; \
	$(VENV)/bin/python -m tools.preflight --stack $(STACK) --needs kind || uses=$$?; \
	[ "$$uses" != 3 ] || kind=; \
	scripts/fetch-tools.sh $(TOOLS) "$$kind" $(PULUMI_VERSION)

preflight: venv ## Check that the Docker daemon answers and the inotify limits suffice, if the stack uses Docker.
	@# A stack on an existing management cluster with SSH workers only runs nothing on this host.
	@uses=0; $(VENV)/bin/python -m tools.preflight --stack $(STACK) || uses=$$?; [ "$$uses" != 3 ] || exit 0; \
	command -v docker >/dev/null || { echo "Docker is required: https://docs.docker.com/engine/install/" >&2; exit 1; }; \
	if ! error="$$(docker info 2>&1 >/dev/null)"; then \
	  echo "docker info failed: $$(printf '%s\n' "$$error" | sed -n '/./{p;q;}')" >&2; \
	  echo "Start Docker (Docker Desktop, or sudo systemctl start docker), or on 'permission denied' add yourself to the docker group (sudo usermod -aG docker \$$USER, then log in again)." >&2; \
	  exit 1; \
	fi; \
	: "kind's node and docker workers of 1.35+ do not start on cgroup v1; kind and kubeadm only fail later, on a kubelet that never got healthy."; \
	cgroup=0; $(VENV)/bin/python -m tools.preflight --stack $(STACK) --needs cgroup-v2 2>/dev/null || cgroup=$$?; \
	if [ "$$cgroup" != 3 ] && [ "$$(docker info --format '{{.CgroupVersion}}' 2>/dev/null || true)" = 1 ]; then \
	  echo "error: the Docker engine runs on cgroup v1, on which the kubelet of Kubernetes 1.35 and newer (kind's node, docker workers) does not start (failCgroupV1, KEP-5573)." >&2; \
	  echo "Boot the Docker host with cgroup v2 (kernel argument systemd.unified_cgroup_hierarchy=1; on WSL2, kernelCommandLine = cgroup_no_v1=all in .wslconfig, then wsl --shutdown)." >&2; \
	  exit 1; \
	fi; \
	: "Below the inotify limits workers fail much later with messages that do not name inotify: stop here."; \
	low=0; level=error; [ "$(INOTIFY_CHECK)" = warn ] && level=warning; \
	for limit in max_user_instances=$(INOTIFY_MAX_USER_INSTANCES) max_user_watches=$(INOTIFY_MAX_USER_WATCHES); do \
	  key="$${limit%=*}" want="$${limit#*=}"; \
	  [ -r "$(INOTIFY_DIR)/$$key" ] || continue; \
	  have="$$(cat "$(INOTIFY_DIR)/$$key")"; \
	  [ "$$have" -ge "$$want" ] || { low=1; echo "$$level: fs.inotify.$$key is $$have, below $$want: tenant workers may exit 255 (too many open files); sudo sysctl fs.inotify.$$key=$$want (README, Prerequisites)" >&2; }; \
	done; \
	if [ "$$low" = 1 ] && [ "$$level" = error ]; then echo "Raise the limits, or go on anyway with make up INOTIFY_CHECK=warn." >&2; exit 1; fi

up: venv preflight tools ## Deploy the stack with pulumi up (checks Docker first when the stack uses it).
	$(PULUMI) up --stack $(STACK) $(UP_FLAGS)

preview: venv tools ## Preview the stack, with the policy pack.
	$(PULUMI) preview --stack $(STACK) --policy-pack policies

destroy: venv tools ## Destroy what up made, the kind cluster included (the empty stack and passphrase stay).
	scripts/pulumi-env.sh --existing $(STACK) pulumi destroy --stack $(STACK) $(UP_FLAGS)

# No prerequisites: anything they printed would land in the redirected kubeconfig.
kubeconfig: ## Print a tenant's kubeconfig: make kubeconfig TENANT=tenant-a > tenant-a.kubeconfig
	@[ -n "$(TENANT)" ] || { echo "usage: make kubeconfig TENANT=<name> [STACK=$(STACK)] > <name>.kubeconfig" >&2; exit 2; }
	@[ -x $(VENV)/bin/python ] || { echo "no $(VENV): run make up first" >&2; exit 1; }
	@scripts/pulumi-env.sh --existing $(STACK) pulumi stack output tenants --show-secrets --json --stack $(STACK) \
	  | $(VENV)/bin/python -c "$$KUBECONFIG_PY" "$(TENANT)"

test: venv ## Lint and run the offline test suite.
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

lint: venv ## Lint only.
	$(VENV)/bin/ruff check .

# No echoed command lines on stdout: make render > render.json gives JSON.
render: venv ## Render the stack offline as JSON.
	@$(VENV)/bin/python -m tools.render --stack $(STACK)

policy: venv ## Check the stack against the policy pack, offline.
	@$(VENV)/bin/python -m tools.policycheck --stack $(STACK)

validate: venv tools ## Validate the deployed stack against the live clusters.
	scripts/pulumi-env.sh --existing $(STACK) $(VENV)/bin/python -m tools.validate --stack $(STACK) $(VALIDATE_FLAGS)

clean: ## Remove the virtualenv and fetched tools (not the stack state).
	rm -rf $(VENV) $(TOOLS)

# make kubeconfig: the tenant's kubeconfig from `pulumi stack output tenants --json` on stdin.
define KUBECONFIG_PY
import json, sys
text = sys.stdin.read()
if not text.strip():
    sys.exit(1)  # pulumi-env.sh or pulumi said why
tenants = json.loads(text) or {}
name = sys.argv[1]
if name not in tenants:
    sys.exit(f"no tenant {name!r} in the stack outputs; tenants: {', '.join(sorted(tenants)) or 'none'}")
kubeconfig = tenants[name]["kubeconfig"]
sys.stdout.write(kubeconfig if kubeconfig.endswith("\n") else kubeconfig + "\n")
endef
export KUBECONFIG_PY
