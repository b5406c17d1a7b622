# The spawner service's build, test and demo entry points. `make help` lists them.
SHELL := /bin/bash
GO ?= go
TOOLS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/jhub-spawner-tools
include hack/versions.env

##@ Main
.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-14s %s\n", $$1, $$2} /^##@/ {printf "\n%s\n", substr($$0, 5)}' $(MAKEFILE_LIST)

.PHONY: demo
demo: build tools deps ## Run the demo: local cluster, spawnerd and a real JupyterHub on 127.0.0.1.
	DEVCLUSTER_BIN_DIR=$(TOOLS_CACHE)/bin bash hack/demo.sh

.PHONY: test
test: build tools deps lint test-unit test-python test-e2e ## Run every test: lint, unit, Python, end to end.

##@ Building
.PHONY: build
build: ## Build the binaries into bin/.
	$(GO) build -o bin/ ./cmd/...

.PHONY: tools
tools: ## Build the pinned control-plane binaries once into the tools cache.
	bash hack/tools.sh >/dev/null

.PHONY: deps
deps: ## Install the Debian packages the demo and the tests use (JupyterHub, configurable-http-proxy, PyJWT).
	bash hack/debian-deps.sh

##@ Testing
.PHONY: test-unit
test-unit: ## Unit tests (no cluster).
	$(GO) test -race $$($(GO) list ./... | grep -v /e2e/)

.PHONY: test-python
test-python: ## The hub-side spawner class's unit tests.
	/usr/bin/python3 -m unittest discover -s deploy/python/tests

# -count=1: the tests build spawnerd and run the hub class from the tree at run time, which Go's
# test cache does not see, so a cached pass could hide a change to either.
.PHONY: test-e2e
test-e2e: tools ## End-to-end tests against the dev cluster (and the real hub and proxy).
	DEVCLUSTER_BIN_DIR=$(TOOLS_CACHE)/bin $(GO) test -count=1 -p 1 -timeout 40m ./e2e/...

# Each target runs alone for FUZZTIME (go test -fuzz takes one target per run);
# `make test-unit` already runs the committed seeds in testdata/fuzz/.
FUZZTIME ?= 60s
FUZZ_TARGETS := ./hubapi:FuzzDecodeStrict ./hubapi:FuzzVerify ./spawner:FuzzParse ./admission:FuzzServeHTTP
.PHONY: fuzz
fuzz: ## Fuzz the request decoder, JWT check, config parser and webhook, FUZZTIME (60s) each.
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz: $${t%%:*} $${t##*:} for $(FUZZTIME)"; \
		$(GO) test $${t%%:*} -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME); \
	done

# -p 1: one package, hence one dev cluster, at a time, so that no benchmark shares the CPUs with another's cluster.
# The run's output goes through hack/benchtable, which ends it with one table: every metric, its target, met.
.PHONY: bench
# MICROBENCH_PKGS time one operation in process, so they run for go test's
# default second each; the rest are scenarios that measure themselves once.
MICROBENCH_PKGS := ./hubapi ./lifecycle ./poll ./spawner

bench: tools deps ## Benchmarks, ending with one table of every metric against its target.
	set -o pipefail; { DEVCLUSTER_BIN_DIR=$(TOOLS_CACHE)/bin $(GO) test -p 1 -run '^$$' -bench . -benchtime 1x -timeout 90m \
		$$($(GO) list ./... | grep -v -x -F $(foreach p,$(MICROBENCH_PKGS),-e github.com/dsmlp/spawner/$(patsubst ./%,%,$(p)))) && \
		$(GO) test -p 1 -run '^$$' -bench . -timeout 10m $(MICROBENCH_PKGS); } 2>&1 | $(GO) run ./hack/benchtable

.PHONY: lint
lint: ## gofmt, go vet, staticcheck.
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@test -x $(TOOLS_CACHE)/staticcheck-$(STATICCHECK_VERSION)/staticcheck || echo "lint: installing staticcheck $(STATICCHECK_VERSION) (first time: ~1 min)" >&2
	@test -x $(TOOLS_CACHE)/staticcheck-$(STATICCHECK_VERSION)/staticcheck || GOBIN=$(TOOLS_CACHE)/staticcheck-$(STATICCHECK_VERSION) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(TOOLS_CACHE)/staticcheck-$(STATICCHECK_VERSION)/staticcheck ./...

.PHONY: clean
clean: ## Remove bin/.
	rm -rf bin
