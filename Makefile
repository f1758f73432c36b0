# logsleuth: `make demo` and `make test` work from a fresh clone with Python 3.11 and the package registries.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
# torch is pinned and installed before the extras so that pip takes the local CPU wheel.
TORCH  := torch==2.13.0

.PHONY: demo test lint typecheck contracts unit venv clean browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# A venv made before the distribution was renamed holds the old "logsleuth" one: drop it.
$(VENV)/.installed-runtime: pyproject.toml | $(BIN)/python
	-@$(BIN)/python -m pip uninstall -q -y logsleuth 2>/dev/null
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	-@$(BIN)/python -m pip uninstall -q -y logsleuth 2>/dev/null
	$(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e '.[test,live,cluster]'
	touch $@ $(VENV)/.installed-runtime

venv: $(VENV)/.installed-runtime

demo: $(VENV)/.installed-runtime
	@# Exit status 1 means "a failure was diagnosed", which is what the demo shows.
	@$(BIN)/logsleuth analyze fixtures/demo --html $(CURDIR)/report.html; rc=$$?; \
	  if [ $$rc -gt 1 ]; then exit $$rc; fi

# A real browser for the report tests: Debian's chromium, never a downloaded one.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium; browser tests will be skipped"; \
	  else echo "warning: chromium missing and not root; browser tests will be skipped"; fi; }

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-test
	$(BIN)/mypy

contracts: $(VENV)/.installed-test
	$(BIN)/lint-imports

unit: $(VENV)/.installed-test browser
	$(BIN)/python -m pytest

test: lint typecheck contracts unit

clean:
	rm -rf $(VENV) report.html .pytest_cache .mypy_cache .ruff_cache
