# Two set-up commands (see README.md): `make trace` runs the main job, `make test`
# runs the tests. Both create or reuse the virtual environments below and
# install the pinned dependencies from requirements/ and, for the environments
# the matrix builds too (ci.txt, the SGLang file pairs), from the package's own
# graphbreak_doctor/matrix/requirements/ (shipped in the wheel).

PYTHON ?= python3
# Python writes the bytecode of what it imports, whatever the machine's
# environment says (some images set PYTHONDONTWRITEBYTECODE): the tests start
# a Python process per command they run, and each would otherwise compile the
# doctor's own modules (an editable install) and the packages of the matrix's
# environments (uv installs them without bytecode) from source again: under a
# second for the doctor, about ten for torch in a matrix environment, in every
# process.
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
VENV063 := .venv-fi063
VENVSGL := .venv-sglang
VENVSGL059 := .venv-sglang-0.5.9
VENVSGL0521 := .venv-sglang-0.5.21
VENVWHEEL := .venv-wheel
VENVVLLM := .venv-vllm
# --durations=30: every stage lists its slowest tests (CONTRIBUTING.md, where the time goes).
PYTEST_ARGS ?= --durations=30
# The traces the tests share (tests/conftest.py): one folder for the stages
# of `make test` and for .ci/run's gates.
TEST_TRACES := $(CURDIR)/reports/test-traces
PIP_FLAGS := -q --disable-pip-version-check
# uv builds the matrix's environments (a dependency of the doctor): every
# environment here installs the doctor without dependencies, so it gets uv
# by name, at the version $(MATRIX_REQ)/ci.txt pins.
MATRIX_REQ := graphbreak_doctor/matrix/requirements
UV := $(shell grep -m1 '^uv==' $(MATRIX_REQ)/ci.txt)
# Each environment gets uv first (pip installs it), and uv installs the
# pinned files: it unpacks each wheel once into its cache for every
# environment (torch is in five of them) and writes no bytecode (a module is
# compiled when it is first imported), where pip took one to three minutes per
# environment. uv reads no pip configuration: the wheel folders pip is
# configured with are handed to it as the matrix hands them
# (matrix/envs.py: pip_find_links). $(call uv_install,ENV) ARGS...
uv_install = links=$$(PYTHONPATH=$(CURDIR) $(1)/bin/python -c 'from graphbreak_doctor.matrix.envs import pip_find_links; print(*("--find-links=" + p for p in dict.fromkeys(pip_find_links())))') && \
	$(1)/bin/uv pip install --quiet --python $(1)/bin/python $$links

.PHONY: trace test test-torch test-stages test-main-then-vllm test-sglang-line test-wheel test-vllm test-vllm-matrix test-main test-fi063 test-both-versions test-sglang test-sglang-0.5.9 test-sglang-0.5.21 chromium bench bench-matrix clean venv

venv: $(VENV)/.installed $(VENV063)/.installed $(VENVSGL)/.installed $(VENVVLLM)/.installed

$(VENV)/.installed: pyproject.toml $(MATRIX_REQ)/ci.txt requirements/ray.txt requirements/test.txt requirements/corpus.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) $(UV)
	$(call uv_install,$(VENV)) -r $(MATRIX_REQ)/ci.txt -r requirements/ray.txt -r requirements/test.txt -r requirements/corpus.txt
	$(VENV)/bin/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
	touch $@

$(VENV063)/.installed: pyproject.toml requirements/fi063.txt requirements/test.txt
	$(PYTHON) -m venv $(VENV063)
	$(VENV063)/bin/pip install $(PIP_FLAGS) $(UV)
	$(call uv_install,$(VENV063)) -r requirements/fi063.txt -r requirements/test.txt
	$(VENV063)/bin/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
	touch $@

# Third environment: SGLang 0.5.23 (its Python; the CUDA-only binaries get
# stand-ins), torch held at 2.13.0. The second file goes in without
# dependencies (see its header).
$(VENVSGL)/.installed: pyproject.toml $(MATRIX_REQ)/sglang.txt $(MATRIX_REQ)/sglang-nodeps.txt requirements/test.txt
	$(PYTHON) -m venv $(VENVSGL)
	$(VENVSGL)/bin/pip install $(PIP_FLAGS) $(UV)
	$(call uv_install,$(VENVSGL)) -r $(MATRIX_REQ)/sglang.txt
	$(call uv_install,$(VENVSGL)) --no-deps -r $(MATRIX_REQ)/sglang-nodeps.txt
	$(call uv_install,$(VENVSGL)) -r requirements/test.txt
	$(VENVSGL)/bin/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
	touch $@

# Optional: SGLang 0.5.9, the oldest release with GLM-5 (not part of `make test`).
$(VENVSGL059)/.installed: pyproject.toml $(MATRIX_REQ)/sglang-0.5.9.txt $(MATRIX_REQ)/sglang-0.5.9-nodeps.txt requirements/test.txt
	$(PYTHON) -m venv $(VENVSGL059)
	$(VENVSGL059)/bin/pip install $(PIP_FLAGS) $(UV)
	$(call uv_install,$(VENVSGL059)) -r $(MATRIX_REQ)/sglang-0.5.9.txt
	$(call uv_install,$(VENVSGL059)) --no-deps -r $(MATRIX_REQ)/sglang-0.5.9-nodeps.txt
	$(call uv_install,$(VENVSGL059)) -r requirements/test.txt
	$(VENVSGL059)/bin/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
	touch $@

# Optional: SGLang 0.5.21, the last release with the tc_piecewise prefill
# runner (not part of `make test`).
$(VENVSGL0521)/.installed: pyproject.toml requirements/sglang-0.5.21.txt requirements/sglang-0.5.21-nodeps.txt requirements/test.txt
	$(PYTHON) -m venv $(VENVSGL0521)
	$(VENVSGL0521)/bin/pip install $(PIP_FLAGS) $(UV)
	$(call uv_install,$(VENVSGL0521)) -r requirements/sglang-0.5.21.txt
	$(call uv_install,$(VENVSGL0521)) --no-deps -r requirements/sglang-0.5.21-nodeps.txt
	$(call uv_install,$(VENVSGL0521)) -r requirements/test.txt
	$(VENVSGL0521)/bin/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
	touch $@

# The main job: GLM-5-NVFP4's dense decoder layer on an emulated RTX PRO 6000
# (sm120); JSON and HTML findings under reports/. SGLang's own dense layer when
# the SGLang environment exists (make venv, make test), then what the default
# GLM-5 launch of that SGLang compiles (the compile map); else the project's
# re-creation of the layer.
trace: $(VENV)/.installed
	@if [ -f $(VENVSGL)/.installed ]; then \
	  echo "make trace: SGLang's own dense layer (--impl sglang, $(VENVSGL))"; \
	  $(VENVSGL)/bin/graphbreak-doctor trace --layer dense --impl sglang --json && \
	  echo "make trace: what a GLM-5 server with the default launch compiles (--model --mode map)" && \
	  $(VENVSGL)/bin/graphbreak-doctor trace --model --mode map --json && \
	  echo "make trace: a fullgraph failure stops a server only where its launch compiles the prefill with tc_piecewise: SGLang 0.5.9-0.5.21 when asked for (0.5.22 removed it); per release: graphbreak-doctor matrix --model --sglang 0.5.9,0.5.21,0.5.23 (docs/matrix.md)"; \
	else \
	  echo "make trace: the re-created dense layer (--impl reference, $(VENV); make venv adds SGLang)"; \
	  $(VENV)/bin/graphbreak-doctor trace --layer dense --impl reference --json; \
	fi

# The stages share their traces (tests/conftest.py) in one folder,
# emptied first, and run independently: with -j2 (.ci/run) the environments
# build while a stage runs, the main stage, vLLM's and the wheel's run on one
# line, and SGLang's, flashinfer 0.6.3's and the matrix's on the other. The tests that compare
# the two FlashInfer environments (marked `both_versions`) run last, on both
# stages' traces.
test:
	rm -rf $(TEST_TRACES)
	GRAPHBREAK_DOCTOR_TEST_TRACES=$(TEST_TRACES) $(MAKE) test-stages
	GRAPHBREAK_DOCTOR_TEST_TRACES=$(TEST_TRACES) $(MAKE) test-both-versions

# Two lines of stages, about as long as each other (CI's 2 cores; the
# stages' times are in docs/benchmarks.md): the main stage, then vLLM's and
# the wheel's; SGLang's, then flashinfer 0.6.3's and the matrix's vLLM axis.
test-stages: test-main-then-vllm test-sglang-line

test-main-then-vllm: test-main $(VENVVLLM)/.installed
	$(MAKE) test-vllm
	$(MAKE) test-wheel

test-sglang-line: test-sglang $(VENV063)/.installed
	$(MAKE) test-fi063
	$(MAKE) test-vllm-matrix

# Fourth environment: vLLM 0.33.0 (its Python; its native libraries get
# stand-ins), torch held at 2.13.0. One file, installed without
# dependencies (see its header).
$(VENVVLLM)/.installed: pyproject.toml $(MATRIX_REQ)/vllm.txt requirements/test.txt
	$(PYTHON) -m venv $(VENVVLLM)
	$(VENVVLLM)/bin/pip install $(PIP_FLAGS) $(UV)
	$(call uv_install,$(VENVVLLM)) --no-deps -r $(MATRIX_REQ)/vllm.txt
	$(call uv_install,$(VENVVLLM)) -r requirements/test.txt
	$(VENVVLLM)/bin/pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
	touch $@

test-vllm: $(VENVVLLM)/.installed
	$(VENVVLLM)/bin/python -m pytest -m vllm $(PYTEST_ARGS)

# The matrix's framework axes: the doctor builds two vLLM releases'
# environments itself (uv, from its vLLM file and each release's pins), and
# two releases of a plugin's framework from local wheels, and maps a model in
# each; run from the main environment, which has no vLLM of its own. The
# tests that start a local Ray cluster run here too (marked `ray_cluster`):
# this line has the time the main stage's line has not.
test-vllm-matrix: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -m 'vllm_matrix or plugin_matrix or ray_cluster' $(PYTEST_ARGS)

# Its test files in two processes (pytest-xdist; each file's tests in one of
# them, so a module's set-up runs once): the stage takes what the other
# stages leave of the two cores. The traces the tests share are traced once
# (tests/conftest.py: Traces holds a lock per trace).
test-main: $(VENV)/.installed chromium
	$(VENV)/bin/python -m pytest -n 2 --dist loadfile -m 'not both_versions and not torch_release and not vllm_matrix and not plugin_matrix and not ray_cluster' $(PYTEST_ARGS)

# The browser tests (marked `browser`) drive Debian's chromium: installed here
# when missing and running as root (CI); otherwise they skip, except under CI=true.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update && apt-get install -y chromium; \
	  else echo "warning: chromium is not installed (apt-get install chromium): browser tests will skip" >&2; fi; }

# The flashinfer 0.6.3 environment runs the tests that depend on the
# FlashInfer version (marked `flashinfer_version`; those marked `flashinfer`
# need FlashInfer but not a version of it, and run in the main stage only),
# on the user's story's device: the runs that widen the entry points or
# devices (marked `one_flashinfer`) run in the main stage only.
test-fi063: $(VENV063)/.installed
	$(VENV063)/bin/python -m pytest -m 'flashinfer_version and not both_versions and not one_flashinfer' $(PYTEST_ARGS)

# Opt-in, not part of `make test`: torch as a matrix axis against another torch
# release (2.14.1, a 5.5 GB CUDA build the doctor installs into an environment
# of its cache with pip; tests/test_torch_axis.py).
test-torch: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -m torch_release tests/test_torch_axis.py $(PYTEST_ARGS)

# The FlashInfer 0.6.3 vs 0.7.4 comparisons, on the traces both stages made.
test-both-versions: $(VENV)/.installed $(VENV063)/.installed
	$(VENV063)/bin/python -m pytest -m both_versions $(PYTEST_ARGS)

# The SGLang environment runs the tests of SGLang's own layers (marked `sglang`).
test-sglang: $(VENVSGL)/.installed
	$(VENVSGL)/bin/python -m pytest -m sglang $(PYTEST_ARGS)

# The doctor as a user installs it: its wheel in an environment of the pinned
# dependencies alone, every command run outside the checkout (.ci/wheel-stage.sh).
$(VENVWHEEL)/.installed: $(MATRIX_REQ)/ci.txt
	$(PYTHON) -m venv $(VENVWHEEL)
	$(VENVWHEEL)/bin/pip install $(PIP_FLAGS) $(UV)
	$(call uv_install,$(VENVWHEEL)) -r $(MATRIX_REQ)/ci.txt
	touch $@

test-wheel: $(VENVWHEEL)/.installed
	bash .ci/wheel-stage.sh $(VENVWHEEL)

test-sglang-0.5.9: $(VENVSGL059)/.installed
	$(VENVSGL059)/bin/python -m pytest -m sglang $(PYTEST_ARGS)

test-sglang-0.5.21: $(VENVSGL0521)/.installed
	$(VENVSGL0521)/bin/python -m pytest -m sglang $(PYTEST_ARGS)

bench: $(VENV)/.installed $(VENV063)/.installed
	$(VENV)/bin/python benchmarks/layers.py
	$(VENV)/bin/python benchmarks/emulation_rss.py
	$(VENV)/bin/python benchmarks/isolation.py
	$(VENV)/bin/python benchmarks/overhead.py
	@if [ -f $(VENVSGL)/.installed ]; then \
	  $(VENVSGL)/bin/python benchmarks/layers.py --env $(VENVSGL) --impl sglang --layers dense,moe; fi

# The matrix's set-up (first and second run) and --jobs 1 vs 2 on four cells
# (reference layer; environments in a temporary folder).
bench-matrix: $(VENV)/.installed
	$(VENV)/bin/python benchmarks/matrix.py

clean:
	rm -rf $(VENV) $(VENV063) $(VENVSGL) $(VENVSGL059) $(VENVSGL0521) $(VENVWHEEL) $(VENVVLLM) reports/*.json reports/*.html
