# `make fit`: train the embedded default (synthetic rain on photos shipped inside installed packages).
# `make test`: lint, format check, the import rules (import-linter's contracts in pyproject.toml), then the test
# suite. Both create .venv and install on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
FIT_ARGS ?=
export NO_ALBUMENTATIONS_UPDATE := 1
export GRADIO_ANALYTICS_ENABLED := False

.PHONY: install fit test bench

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

fit: install
	$(PY) -m derain.fit --config configs/synthetic.yaml $(FIT_ARGS)

test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: install
	$(PY) benchmarks/attention.py
	$(PY) benchmarks/train.py
	$(PY) benchmarks/infer.py
