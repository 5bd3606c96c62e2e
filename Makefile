# The two commands of the quick start: `make demo` and `make test`.
# Each one sets everything up by itself on a fresh machine.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SYSTEM_PYTHON ?= python3
PYTEST_WORKERS ?= 2

.PHONY: setup demo test test-full benchmark clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(SYSTEM_PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt -e ".[test]"
	$(PYTHON) -c "import torch; print('sim ready:', torch.sim.device_count(), 'devices')"
	touch $@

demo: setup
	$(PYTHON) -m backend.demo

test: setup
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) tests

test-full: setup
	SIM_FULL_OPINFO=1 $(PYTHON) -m pytest -n $(PYTEST_WORKERS) tests

benchmark: setup
	$(PYTHON) benchmarks/backend_speed.py
	$(PYTHON) benchmarks/explorer_speed.py

clean:
	rm -rf $(VENV) build *.egg-info
