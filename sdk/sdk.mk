# The Python and TypeScript SDKs (sdk/python, sdk/typescript). Included by the Makefile. Each
# suite starts its own real `lbb serve` (bin/lbb, the ns driver, the image under
# $(LBB_DATA_DIR)/images) on a free port, runs the seed's samples and the SDK tests against it,
# and stops it. Not root: the server tests skip and say so. The work is in sdk/test.sh.
BIN ?= bin

.PHONY: test-sdk test-sdk-python test-sdk-ts

test-sdk: images ## The Python and TypeScript SDK suites against real servers (both run; fails if either fails).
	LBB_BIN=$(CURDIR)/$(BIN)/lbb bash sdk/test.sh all

test-sdk-python: build ## The Python SDK alone: pip install into a temp venv, pytest.
	LBB_BIN=$(CURDIR)/$(BIN)/lbb bash sdk/test.sh python

test-sdk-ts: build ## The TypeScript SDK alone: npm ci, tsc (strict), node --test.
	LBB_BIN=$(CURDIR)/$(BIN)/lbb bash sdk/test.sh ts
