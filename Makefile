# gpu-tenancy: `make up` deploys the dev stack, `make test` runs the offline suite.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
STACK ?= dev
VENV := .venv
TOOLS := .tools
# Host tool versions are pinned in gpu_tenancy/versions.py with everything else.
KIND_VERSION := $(shell $(PYTHON) -c 'from gpu_tenancy.versions import KIND_VERSION; print(KIND_VERSION)')
PULUMI_VERSION := $(shell $(PYTHON) -c 'from gpu_tenancy.versions import PULUMI_CLI_VERSION; print(PULUMI_CLI_VERSION)')
# kind and pulumi from .tools/bin when the host has none; the program's commands inherit this PATH.
export PATH := $(CURDIR)/$(TOOLS)/bin:$(CURDIR)/$(VENV)/bin:$(PATH)
UP_FLAGS ?= --yes
PULUMI := scripts/pulumi-env.sh $(STACK) pulumi

.PHONY: help venv tools up preview destroy test lint render policy validate clean

help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / { printf "  %-10s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

$(VENV)/.installed: requirements.txt requirements-dev.txt policies/requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "Python 3.11+ is required" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed ## Create the virtualenv with every requirement.

tools: ## Fetch kind and the Pulumi CLI into .tools/bin unless those on PATH fit the pins.
	@scripts/fetch-tools.sh $(TOOLS) $(KIND_VERSION) $(PULUMI_VERSION)

up: venv tools ## Deploy the stack (default dev) with pulumi up.
	@command -v docker >/dev/null || { echo "Docker is required: https://docs.docker.com/engine/install/" >&2; exit 1; }
	$(PULUMI) up --stack $(STACK) $(UP_FLAGS)

preview: venv tools ## Preview the stack, with the policy pack.
	$(PULUMI) preview --stack $(STACK) --policy-pack policies

destroy: venv tools ## Destroy the stack: tenants, workers and the kind cluster.
	scripts/pulumi-env.sh --existing $(STACK) pulumi destroy --stack $(STACK) $(UP_FLAGS)

test: venv ## Lint and run the offline test suite.
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

lint: venv ## Lint only.
	$(VENV)/bin/ruff check .

render: venv ## Render the stack offline as JSON.
	$(VENV)/bin/python -m tools.render --stack $(STACK)

policy: venv ## Check the stack against the policy pack, offline.
	$(VENV)/bin/python -m tools.policycheck --stack $(STACK)

validate: venv tools ## Validate the deployed stack against the live clusters.
	scripts/pulumi-env.sh --existing $(STACK) $(VENV)/bin/python -m tools.validate --stack $(STACK) $(VALIDATE_FLAGS)

clean: ## Remove the virtualenv and fetched tools (not the stack state).
	rm -rf $(VENV) $(TOOLS)
