# Two set-up commands (see README): `make trace` runs the main job, `make test`
# runs the tests. Both create or reuse the virtual environments below and
# install the pinned dependencies from requirements/.

PYTHON ?= python3
VENV := .venv
VENV063 := .venv-fi063
PYTEST_ARGS ?=

.PHONY: trace test test-main test-fi063 chromium bench clean venv

venv: $(VENV)/.installed $(VENV063)/.installed

$(VENV)/.installed: pyproject.toml requirements/ci.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements/ci.txt
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

$(VENV063)/.installed: pyproject.toml requirements/fi063.txt
	$(PYTHON) -m venv $(VENV063)
	$(VENV063)/bin/pip install -q --disable-pip-version-check -r requirements/fi063.txt
	$(VENV063)/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

# The main job: GLM-5-NVFP4's dense decoder layer on an emulated RTX PRO 6000
# (sm120); JSON and HTML findings under reports/.
trace: $(VENV)/.installed
	$(VENV)/bin/graphbreak-doctor trace --layer dense --json

test: test-main test-fi063

test-main: $(VENV)/.installed chromium
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# The browser tests (marked `browser`) drive Debian's chromium: installed here
# when missing and running as root (CI); otherwise they skip, except under CI=true.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update && apt-get install -y chromium; \
	  else echo "warning: chromium is not installed (apt-get install chromium): browser tests will skip" >&2; fi; }

# The flashinfer 0.6.3 environment runs the tests that depend on the
# FlashInfer version (marked `flashinfer`).
test-fi063: $(VENV063)/.installed
	$(VENV063)/bin/python -m pytest -m flashinfer $(PYTEST_ARGS)

bench: $(VENV)/.installed $(VENV063)/.installed
	$(VENV)/bin/python benchmarks/layers.py
	$(VENV)/bin/python benchmarks/emulation_rss.py
	$(VENV)/bin/python benchmarks/isolation.py

clean:
	rm -rf $(VENV) $(VENV063) reports/*.json reports/*.html
