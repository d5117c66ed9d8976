# Thin targets; the logic lives in scripts/. Works from a fresh clone on Debian 12 as root.
VENV      ?= .venv
PY        := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: all venv engine images test demo lint bench clean
all: test

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev]'
	touch $@

venv: $(VENV)/.installed

engine:
	bash scripts/engine.sh

images: engine
	python3 scripts/images.py

test: venv engine images
	$(PY) -m pytest $(PYTEST_ARGS)

demo: venv engine images
	$(PY) examples/quickstart.py

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy --strict

bench: venv engine images
	$(PY) -m pip install --quiet docker
	$(PY) bench/run.py

# Removes the virtualenv and every container, network and volume carrying our label; nothing else.
clean:
	bash scripts/clean.sh
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
