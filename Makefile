# Set-up and everyday commands. Everything installs into .venv at the repository root.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: install test clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

test: install
	$(PY) -m pytest tests

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
