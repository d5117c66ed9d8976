# Thin targets; the logic lives in scripts/. Works from a fresh clone on Debian 12 as root.
VENV      ?= .venv
PY        := $(VENV)/bin/python
PYTEST_ARGS ?=
# The optional backends and framework integrations in the ranges pyproject.toml gives,
# LangChain's conformance suite (the tests run Inspect's and LangChain's own checks) and the
# documentation site's toolchain (the suite builds the site with --strict).
EXTRAS    := kubernetes,mcp,inspect,langchain,pytest,conformance,docs

.PHONY: all venv venv-core engine engine-stop images kube test-tools docs-tools test demo docs \
	lint bench clean
all: test

# `python3 -m venv` needs Debian's python3-venv (ensurepip); it is installed, as root, only
# when creating the virtualenv fails without it. `make demo` installs only the core
# dependencies (.core); `make test` adds the extras and the test tools (.installed).
$(VENV)/.core: pyproject.toml
	@python3 -m venv $(VENV) >/dev/null 2>&1 || \
	    { bash scripts/apt-install.sh venv python3-venv && python3 -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed: $(VENV)/.core
	$(PY) -m pip install --quiet -e '.[test,dev,$(EXTRAS)]'
	touch $@

venv-core: $(VENV)/.core
venv: $(VENV)/.installed

engine:
	bash scripts/engine.sh

# Stops the dockerd that scripts/engine.sh started (its pidfile), and nothing else.
engine-stop:
	bash scripts/engine.sh stop

images: venv-core engine
	$(PY) scripts/images.py

# The pull tests serve images from Debian's docker-registry on loopback (no outside registry);
# the package's own service (on :5000, all interfaces) is stopped where systemd started it.
# Go (standard library only) checks the JSON wire format in tests/unit/test_go_wire.py.
# tmux is the real terminal of tests/integration/test_terminal.py (ps, top, progress).
# bubblewrap (bwrap) runs the process backend (type="process"); nsenter/setpriv are util-linux.
test-tools:
	@command -v docker-registry >/dev/null 2>&1 || { \
	    bash scripts/apt-install.sh test-tools docker-registry && \
	    if command -v systemctl >/dev/null 2>&1; then \
	        systemctl disable --now docker-registry >/dev/null 2>&1 || true; fi; }
	@command -v go >/dev/null 2>&1 || bash scripts/apt-install.sh test-tools golang-go
	@command -v tmux >/dev/null 2>&1 || bash scripts/apt-install.sh test-tools tmux
	@command -v bwrap >/dev/null 2>&1 || bash scripts/apt-install.sh test-tools bubblewrap

# Debian's chromium takes the screenshots of the built site in tests/integration/test_docs_site.py.
docs-tools:
	@command -v chromium >/dev/null 2>&1 || bash scripts/apt-install.sh docs-tools chromium

# A real single-node Kubernetes 1.20 on loopback for tests/kubernetes (scripts/kube.sh: built
# once into /var/cache/sandbox-sdk/kube, kept between runs; `make clean` stops it).
kube: images
	bash scripts/kube.sh start

test: venv engine images test-tools docs-tools kube
	$(PY) -m pytest $(PYTEST_ARGS)

demo: venv-core engine images
	$(PY) examples/quickstart.py
	@echo "demo: the engine keeps running for your next try; 'make engine-stop' stops it" \
	    "(only if scripts/engine.sh started it)."

# The documentation site, into site/ (open site/index.html); --strict: a warning fails.
docs: venv
	$(VENV)/bin/mkdocs build --strict

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy --strict

# docker-py and the peer SDKs (llm-sandbox, openai-agents) live only in this separate bench
# virtualenv (same python3, the SDK editable), never in $(VENV); `venv` first so python3's
# venv module is known to work.
BENCH_VENV ?= .venv-bench
$(BENCH_VENV)/.installed: pyproject.toml | venv
	python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -e '.[kubernetes]' docker llm-sandbox openai-agents
	touch $@

bench: $(BENCH_VENV)/.installed engine images test-tools kube
	$(BENCH_VENV)/bin/python bench/run.py
	$(BENCH_VENV)/bin/python bench/backends.py
	$(BENCH_VENV)/bin/python bench/targets.py

# Stops the local Kubernetes; removes the virtualenvs and every container, network and volume
# carrying our label; nothing else.
clean:
	bash scripts/kube.sh stop
	bash scripts/clean.sh
	rm -rf $(VENV) $(BENCH_VENV) .pytest_cache .mypy_cache .ruff_cache site
