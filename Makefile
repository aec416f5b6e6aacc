# muxterm: every target prints a one-line ==> banner. `make run` and `make test` set everything
# up on a fresh machine (Go modules, npm packages; `make test` also needs Chromium, which
# `make deps-browser` installs from Debian's packages).

GO        ?= go
BIN       := bin/gateway
CLI       := bin/muxterm
VERSION   ?= 0.1.0-dev
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
GOFLAGS_T := -race -count=1
# A count, not a duration: with a duration Go 1.26's fuzz coordinator can fail a clean run with
# "context deadline exceeded" at the deadline (golang/go#75804, fixed in Go 1.27).
FUZZTIME  ?= 100000x
PORT      ?= 8222

.PHONY: all run build frontend test test-unit test-race test-fuzz test-e2e test-browser bench bench-full lint deps deps-browser clean

all: build

frontend/node_modules/.package-lock.json: frontend/package.json frontend/package-lock.json
	@echo "==> npm ci (frontend)"
	cd frontend && npm ci --no-audit --no-fund

frontend: frontend/node_modules/.package-lock.json
	@echo "==> frontend: typecheck and build"
	cd frontend && npm run --silent typecheck && npm run --silent build

build: frontend
	@echo "==> build $(BIN)"
	$(GO) build -o $(BIN) ./cmd/gateway
	@echo "==> build $(CLI)"
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(CLI) ./cmd/muxterm

run: build
	@echo "==> run on 127.0.0.1:$(PORT) (Ctrl-C stops it)"
	./$(BIN) --listen 127.0.0.1:$(PORT)

deps:
	@echo "==> go mod download"
	$(GO) mod download

deps-browser:
	@echo "==> chromium (Debian package)"
	@command -v chromium >/dev/null 2>&1 || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

test: test-unit test-fuzz test-e2e test-browser

test-unit: frontend deps
	@echo "==> go test -race (unit and e2e packages)"
	$(GO) test $(GOFLAGS_T) ./...
	@echo "==> frontend unit tests"
	cd frontend && npm test --silent

test-race: test-unit

test-fuzz: frontend
	@echo "==> fuzz targets, $(FUZZTIME) each"
	@for p in ./proto/ ./gateway/; do \
		for f in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "--- $$p $$f"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x $$p || exit 1; \
		done; \
	done

test-e2e: build
	@echo "==> e2e against the built binary"
	MUXTERM_BIN=$(CURDIR)/$(BIN) MUXTERM_CLI_BIN=$(CURDIR)/$(CLI) $(GO) test $(GOFLAGS_T) -tags e2e -skip 'Browser' ./e2e/

test-browser: build deps-browser
	@echo "==> browser tests in headless Chromium"
	MUXTERM_BIN=$(CURDIR)/$(BIN) MUXTERM_BROWSER=1 $(GO) test -count=1 -tags e2e -run 'Browser' ./e2e/

bench: build
	@echo "==> session benchmarks and muxbench -short (about 3 minutes)"
	$(GO) test -run '^$$' -bench . -benchtime 20x ./session/
	$(GO) run ./cmd/muxbench -short -gateway $(BIN) -json bench-results/muxbench-short.json -md bench-results/muxbench-short.md

bench-full: build
	@echo "==> muxbench, full run (about 8 minutes)"
	$(GO) run ./cmd/muxbench -gateway $(BIN) -json bench-results/muxbench-full.json -md bench-results/muxbench-full.md

lint: frontend
	@echo "==> gofmt, go vet, staticcheck"
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

clean:
	@echo "==> clean"
	rm -rf bin frontend/node_modules
	find frontend/dist -mindepth 1 ! -name .gitkeep -delete
