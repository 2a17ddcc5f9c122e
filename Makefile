# Two commands for a fresh machine (see README):
#   make demo   set up, then run the local demo on the embedded control plane
#   make test   set up, then lint, type-check and run every test
# Both install what they need: a virtualenv in .venv and the control-plane
# binaries, built from the Go module proxy and cached in ~/.cache/grelmicro-sidecar.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup binaries lint typecheck test test-fast demo bench clean manifests kind-e2e release

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

binaries: $(STAMP)
	$(PY) -m tests.cluster build

lint: $(STAMP)
	$(VENV)/bin/ruff check sidecar tests bench hack
	$(VENV)/bin/ruff format --check sidecar tests bench hack
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: lint typecheck binaries
	$(PY) -m pytest -p no:cacheprovider --durations=30 tests

# In-process tests only (tests/unit): no control plane, no node, no binary built.
test-fast: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider tests/unit

demo: binaries
	$(PY) -m tests.demo

bench: binaries
	$(PY) -m bench

# Regenerate manifests/install.yaml and prometheus-rules.yaml from the chart (tests fail when they drift).
manifests: binaries
	$(PY) -m tests.ship.render

# A release from sidecar/__init__.py's version into $(DIST): wheel, sdist, image (OCI archive),
# chart pinned to the image's digest, SBOM, SHA256SUMS (hack/release.py; root: buildah).
DIST ?= dist
release: $(STAMP)
	$(PY) -m hack.release build --dist $(DIST)

# The docs site (mkdocs.yml, docs/) into site/, built with --strict, then every link it
# and README have into the site or the repository checked offline (tests/ship/docs.py).
.PHONY: docs
docs: $(STAMP)
	$(PY) -m tests.ship.docs

# End to end on a kind cluster; needs Docker, kind, kubectl and helm (see docs/install.md).
kind-e2e:
	hack/kind-e2e.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
