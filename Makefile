# rosenna: the two set-up commands of a fresh clone.
#   make demo   venv + package, generate the bundled gemm_big example, build both archives, verify
#   make test   venv + test dependencies (+ gfortran etc. when root on Debian/Ubuntu), pytest -n auto
#   make docs   the documentation site into build/docs/html (Sphinx, warnings as errors)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
DEMO   := build/demo

.PHONY: demo test docs install test-deps system-deps clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(PY) setup.cfg pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[verify]'
	touch $@

install: $(VENV)/.installed

# One pip call for the package and every test dependency (one resolve, one editable build), without
# pip's byte-compiling, which runs on one core (torch: ~40 s of CPU); compileall then writes the same
# .pyc files on every core. Like pip, it goes on past a file this Python cannot compile (torch ships
# a few for newer Pythons).
$(VENV)/.test-installed: $(PY) setup.cfg pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -e '.[verify,test,docs]' torch==2.13.0 onnxscript build scikit-learn skl2onnx onnxmltools xgboost fpm==0.12.0
	$(PY) -m compileall -q -j 0 $(VENV)/lib > /dev/null || true
	touch $(VENV)/.installed $(VENV)/.docs-installed $@

test-deps: $(VENV)/.test-installed

system-deps:
	@sh .ci/system-deps.sh

demo: install
	mkdir -p $(DEMO)
	$(VENV)/bin/rosenna zoo gemm_big -o $(DEMO)/gemm_big.onnx
	$(VENV)/bin/rosenna generate $(DEMO)/gemm_big.onnx --out $(DEMO)
	$(MAKE) -f $(DEMO)/gemm_big.mk
	$(MAKE) -f $(DEMO)/gemm_big_fortran.mk
	$(VENV)/bin/rosenna verify $(DEMO)/gemm_big.onnx

test: system-deps test-deps
	$(PY) -m pytest -n auto --durations=30

# Warnings are errors (-W; --keep-going reports them all), -n flags every unresolved reference;
# internal links and heading anchors are checked by MyST (docs/conf.py).
$(VENV)/.docs-installed: $(PY) setup.cfg pyproject.toml
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[docs]'
	touch $@

docs: $(VENV)/.docs-installed
	$(PY) -m sphinx -b html -W -n --keep-going -q -d build/docs/doctrees docs build/docs/html
	@echo "docs: build/docs/html/index.html"

clean:
	rm -rf build
