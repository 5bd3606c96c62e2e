# The quick start: `make docs` (the main job: build the site and serve it) and `make test`.
# Each one sets everything up by itself on a fresh machine.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SYSTEM_PYTHON ?= python3
PYTEST_WORKERS ?= 2
PYTEST_ARGS ?=
PORT ?= 8000
# The site's plotly.js (below), built by set-up.
PLOTLY_BUNDLE := build/plotly/plotly.min.js
PLOTLY_TOOLING := docs/tooling/plotly_bundle
# Set-up compiles through Debian's ccache when it is there (a missing folder on PATH is harmless), so that later
# builds of the same sources reuse its objects: the wheel test's copy of the project (tests/environments.py) and
# the next set-up. setup.py makes the cache ignore which folder the sources are in.
WITH_CCACHE := PATH=/usr/lib/ccache:$$PATH
# toy and mydev compile against the torch in $(VENV): with this folder as ccache's base, the paths of that torch's
# headers are relative too, so that a clone in another folder reuses their objects as well.
WITH_CCACHE_HERE := CCACHE_BASEDIR=$(CURDIR) CCACHE_NOHASHDIR=1 $(WITH_CCACHE)

.PHONY: setup ccache node browser demo docs serve lab test test-full benchmark demand clean

setup: ccache $(VENV)/.installed $(PLOTLY_BUNDLE)

# torch and the build tools first; then the package, whose C++ parts (backend/torch_sim/csrc over sim's driver in
# backend/simdriver, explorer/pu1_explorer/csrc)
# compile against that torch at install time (--no-build-isolation), as vendor extensions do; then
# toy (examples/toy), the second backend that the scorecard page and the tests run, into build/toy-backend;
# then the backend that `pu1-explorer new mydev` generates (build/mydev-source), which the page "Start your own
# backend" and the template's tests run, into build/mydev-backend.
$(VENV)/.installed: pyproject.toml setup.py constraints.txt docs/tooling/pyproject.toml $(wildcard backend/torch_sim/csrc/*) $(wildcard backend/simdriver/*/*) $(wildcard explorer/pu1_explorer/csrc/*) \
		$(wildcard examples/toy/csrc/*) $(wildcard examples/toy/torch_toy/*.py) examples/toy/setup.py \
		explorer/pu1_explorer/new_backend.py $(shell find explorer/pu1_explorer/vendor_template -type f -not -path '*/__pycache__/*')
	test -x $(PYTHON) || $(SYSTEM_PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt torch numpy setuptools wheel ninja
	$(WITH_CCACHE) $(PIP) install --quiet --no-build-isolation -c constraints.txt -e ".[test,docs]"
	$(PIP) install --quiet --no-deps --no-build-isolation -e docs/tooling  # the docs build's tooling (not the product)
	$(PYTHON) -c "import torch; print('sim ready:', torch.sim.device_count(), 'devices')"
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(WITH_CCACHE_HERE) $(PIP) install --quiet --no-build-isolation --no-deps --upgrade \
		--target build/toy-backend examples/toy
	rm -rf build/mydev-source
	$(PYTHON) -m pu1_explorer new mydev -o build/mydev-source
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(WITH_CCACHE_HERE) $(PIP) install --quiet --no-build-isolation --no-deps --upgrade \
		--target build/mydev-backend build/mydev-source
	touch $@

# The site's plotly.js: only the trace types its figures draw (docs/tooling/plotly_bundle/traces.js), built with
# esbuild from the npm registry's plotly.js (npm ci of the folder's package-lock.json, into build/plotly-npm).
$(PLOTLY_BUNDLE): $(PLOTLY_TOOLING)/package.json $(PLOTLY_TOOLING)/package-lock.json $(PLOTLY_TOOLING)/build.js \
		$(PLOTLY_TOOLING)/traces.js | node
	rm -rf build/plotly-npm && mkdir -p build/plotly-npm $(dir $@)
	cp $(PLOTLY_TOOLING)/package.json $(PLOTLY_TOOLING)/package-lock.json build/plotly-npm/
	cd build/plotly-npm && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	node $(PLOTLY_TOOLING)/build.js build/plotly-npm $@

# Node.js and npm, for the site's plotly.js bundle: Debian's, when they are missing.
node:
	@command -v npm >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; \
	  else echo "the site's plotly.js bundle needs Node.js and npm: sudo apt-get install nodejs npm"; exit 1; fi; }

# Debian's ccache, so that the C++ compiles once per test run. Optional: without it everything still builds.
ccache:
	@command -v ccache >/dev/null 2>&1 || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1 || { \
	  export DEBIAN_FRONTEND=noninteractive; apt-get install -y -qq ccache >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq ccache >/dev/null; } || echo "note: could not install ccache"; }
	@command -v ccache >/dev/null 2>&1 || echo "note: without ccache (apt-get install ccache) the tests compile the C++ again"

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
	@$(PYTHON) -m pu1_docs.serve_site site --port $(PORT)

lab: setup
	$(PYTHON) -m jupyterlab --ip=127.0.0.1 --no-browser $$( [ "$$(id -u)" = 0 ] && echo --allow-root ) notebooks

test: setup browser
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) tests

test-full: setup browser
	SIM_FULL_OPINFO=1 $(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup tests

# Measures which ATen overloads the zoo's models reach on sim (pu1_explorer/zoo.py) into the explorer's package data,
# which `pu1-explorer next-kernels` ranks missing kernels by. Run it after a change of torch, transformers or the zoo.
demand: setup
	$(PYTHON) -m pu1_explorer demand --device sim -o explorer/pu1_explorer/demand.json

benchmark: setup
	$(PYTHON) benchmarks/backend_speed.py
	$(PYTHON) benchmarks/openmp_teams.py
	$(PYTHON) benchmarks/thread_time.py
	$(PYTHON) benchmarks/thread_time.py --workload multiplies
	$(PYTHON) benchmarks/processor_placement.py
	$(PYTHON) benchmarks/run_ahead.py
	$(PYTHON) benchmarks/explorer_speed.py
	$(PYTHON) benchmarks/trace_speed.py
	$(PYTHON) benchmarks/widget_speed.py
	$(PYTHON) benchmarks/import_speed.py
	$(PYTHON) benchmarks/profiler_overhead.py
	$(PYTHON) benchmarks/interface_trace_overhead.py
	$(PYTHON) benchmarks/sanitizer_overhead.py
	$(PYTHON) benchmarks/compile_speed.py
	$(PYTHON) benchmarks/graph_speed.py
	$(PYTHON) benchmarks/fresh_process_speed.py
	$(PYTHON) benchmarks/new_backend_speed.py
	$(PYTHON) benchmarks/site_build.py
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict --quiet
	$(PYTHON) benchmarks/site_load.py

clean:
	rm -rf $(VENV) build site docs/notebooks *.egg-info backend/torch_sim/_C.*.so explorer/pu1_explorer/_native.*.so
