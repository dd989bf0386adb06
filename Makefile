# lbb — run code nobody here wrote, in an isolated sandbox. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
LBB_DATA_DIR ?= /var/lib/lbb
export LBB_DATA_DIR

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z_-]+:.*## /{printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install the host packages builds and tests need (debootstrap, bubblewrap, PostgreSQL, …) and gVisor's runsc.
	@bash scripts/deps.sh
	@bash scripts/install-runsc.sh

.PHONY: test-deps
test-deps: ## What only the tests need besides deps: SeaweedFS's weed (the S3 server of the blob tests), built once.
	@bash scripts/install-seaweedfs.sh

.PHONY: build
build: ## Build bin/lbb and the static guest agent bin/lbb-agent.
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/lbb-agent ./cmd/lbb-agent
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/lbb ./cmd/lbb

.PHONY: images
images: build ## Build (or find cached) the base images under $(LBB_DATA_DIR)/images.
	$(BIN)/lbb images build

.PHONY: serve
serve: deps build ## Run the service (builds the images on first start).
	$(BIN)/lbb serve

.PHONY: vet
vet: ## go vet and gofmt.
	$(GO) vet ./...
	cd sdk/go && $(GO) vet ./...
	cd test/dbos && $(GO) vet ./...
	cd test/temporal && $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

.PHONY: test-quick
test-quick: ## The inner loop: unit tests that need no images (skip privileged suites).
	$(GO) test -short ./...

.PHONY: test
test: deps test-deps vet images ## Everything: vet, the image, both drivers through the suites, service, MCP and SDK tests.
	LBB_AGENT=$(CURDIR)/$(BIN)/lbb-agent LBB_BIN=$(CURDIR)/$(BIN)/lbb $(GO) test -count=1 -timeout 40m ./...
	cd sdk/go && LBB_BIN=$(CURDIR)/$(BIN)/lbb $(GO) test -count=1 ./...
	cd test/dbos && LBB_BIN=$(CURDIR)/$(BIN)/lbb $(GO) test -count=1 ./...
	cd test/temporal && LBB_AGENT=$(CURDIR)/$(BIN)/lbb-agent $(GO) test -count=1 ./...
	LBB_E2E_REMOTE_HOST=1 LBB_AGENT=$(CURDIR)/$(BIN)/lbb-agent LBB_BIN=$(CURDIR)/$(BIN)/lbb $(GO) test -count=1 -timeout 40m ./test/e2e/
	LBB_E2E_FLEET=1 LBB_AGENT=$(CURDIR)/$(BIN)/lbb-agent LBB_BIN=$(CURDIR)/$(BIN)/lbb $(GO) test -count=1 -timeout 20m -run '$(FLEET_E2E)' ./test/e2e/
	LBB_BIN=$(CURDIR)/$(BIN)/lbb bash sdk/test.sh all
	$(MAKE) --no-print-directory fuzz

# The e2e cases run again on a fleet (LBB_E2E_FLEET=1: PostgreSQL, SeaweedFS, two lbb host):
# one-call runs, templates, idempotency, limits and the CLI (TestService); sandboxes, commands,
# files, stop and resume with the Go SDK and plain HTTP (TestLevel3Seed000); the Python SDK's
# seed samples (TestFleetSDKSeedSamples). The fleet's own tests run in the first pass.
FLEET_E2E = ^(TestService|TestLevel3Seed000|TestFleetSDKSeedSamples)$$

FUZZTIME ?= 10s
.PHONY: fuzz
fuzz: build ## Run every Go fuzz target (func FuzzX in a _test.go) for FUZZTIME (10s) each (once more after Go 1.26's deadline race).
	@set -e; for f in $$(git grep -l --untracked '^func Fuzz' -- '*_test.go'); do \
	  for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    d=$$(dirname $$f); m=.; case $$d in sdk/go*) m=sdk/go; d=$${d#sdk/go}; d=$${d#/};; esac; \
	    echo "fuzz $$m/$$d $$fn"; \
	    (cd $$m && for try in 1 2; do \
	      if out=$$(LBB_AGENT=$(CURDIR)/$(BIN)/lbb-agent $(GO) test ./$$d -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) 2>&1); then echo "$$out"; exit 0; fi; \
	      echo "$$out"; \
	      if [ $$try = 1 ] && echo "$$out" | grep -qx '    context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
	        echo "fuzz: $$fn found no failing input: Go 1.26's fuzz coordinator fails at its -fuzztime deadline by a race (golang/go#75804, fixed in Go 1.27); once more"; continue; fi; \
	      exit 1; done); \
	  done; done

include sdk/sdk.mk

.PHONY: bench
bench: build ## Benchmarks beside bare-process and bwrap baselines.
	$(BIN)/lbb bench
