# The quick start: `make docs` (the main job: build the site and serve it) and `make test`.
# Each one sets everything up by itself on a fresh machine.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SYSTEM_PYTHON ?= python3
PYTEST_WORKERS ?= 2
PORT ?= 8000

.PHONY: setup browser demo docs serve lab test test-full benchmark clean

setup: $(VENV)/.installed

# torch and the build tools first; then the package, whose C++ parts (backend/csrc, explorer/csrc)
# compile against that torch at install time (--no-build-isolation), as vendor extensions do; then
# toy, the second (test) backend that the scorecard page also runs, into build/toy-backend.
$(VENV)/.installed: pyproject.toml setup.py constraints.txt $(wildcard backend/csrc/*) $(wildcard explorer/csrc/*) \
		$(wildcard tests/fixture_backend/csrc/*)
	test -x $(PYTHON) || $(SYSTEM_PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt torch numpy setuptools wheel ninja
	$(PIP) install --quiet --no-build-isolation -c constraints.txt -e ".[test,docs]"
	$(PYTHON) -c "import torch; print('sim ready:', torch.sim.device_count(), 'devices')"
	$(PYTHON) -c "from pathlib import Path; from tests.fixture_backend import build_fixture_backend; \
		build_fixture_backend(Path('build/toy-backend')); print('toy ready: build/toy-backend')"
	touch $@

# Debian's Chromium for the browser tests (Playwright drives it; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "the browser tests need Debian's chromium: sudo apt-get install chromium"; exit 1; fi; }

demo: setup
	$(PYTHON) -m torch_sim.demo

# Builds the site strictly (every notebook executed, any error or warning fails) and serves it.
docs: setup
	@start=$$(date +%s); \
	NO_MKDOCS_2_WARNING=1 timeout 1800 $(PYTHON) -m mkdocs build --strict || exit 1; \
	echo "site built in $$(( $$(date +%s) - start )) s"
	$(MAKE) --no-print-directory serve

serve:
	@$(PYTHON) docs/hooks/serve_site.py site --port $(PORT)

lab: setup
	$(PYTHON) -m jupyterlab --ip=127.0.0.1 --no-browser $$( [ "$$(id -u)" = 0 ] && echo --allow-root ) notebooks

test: setup browser
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup tests

test-full: setup browser
	SIM_FULL_OPINFO=1 $(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup tests

benchmark: setup
	$(PYTHON) benchmarks/backend_speed.py
	$(PYTHON) benchmarks/explorer_speed.py
	$(PYTHON) benchmarks/trace_speed.py
	$(PYTHON) benchmarks/widget_speed.py
	$(PYTHON) benchmarks/import_speed.py
	$(PYTHON) benchmarks/profiler_overhead.py
	$(PYTHON) benchmarks/compile_speed.py
	$(PYTHON) benchmarks/fresh_process_speed.py
	$(PYTHON) benchmarks/site_build.py

clean:
	rm -rf $(VENV) build site docs/notebooks *.egg-info backend/_C.*.so explorer/_native.*.so
