# muxterm: every target prints a one-line ==> banner. `make run` and `make test` set everything
# up on a fresh machine (Go modules, npm packages; `make test` also needs Chromium, which
# `make deps-browser` installs from Debian's packages, and Prometheus, which `make deps-tools`
# installs the same way).

GO        ?= go
BIN       := bin/gateway
CLI       := bin/muxterm
GOFLAGS_T := -race -count=1
# A count, not a duration: with a duration Go 1.26's fuzz coordinator can fail a clean run with
# "context deadline exceeded" at the deadline (golang/go#75804, fixed in Go 1.27).
FUZZTIME  ?= 100000x
VT_FUZZTIME ?= 10000x
PORT      ?= 8222
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo unknown)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

JAEGER    := bin/jaeger
CLIENT    := packages/client
VSCODE    := examples/vscode

# The client and the frontend are rebuilt only when a source of theirs changed (so `make run`
# goes straight to `go build` when only Go changed): their targets are files they build.
CLIENT_SRC      := $(shell find $(CLIENT)/src $(CLIENT)/test $(CLIENT)/scripts -type f 2>/dev/null) \
                   $(CLIENT)/package.json $(CLIENT)/tsconfig.json $(CLIENT)/tsconfig.src.json
FRONTEND_SRC    := $(shell find frontend/src frontend/scripts -type f 2>/dev/null) \
                   frontend/package.json frontend/tsconfig.json
CLIENT_STAMP    := $(CLIENT)/dist/index.js
FRONTEND_STAMP  := frontend/dist/app.js

.PHONY: all run build install client frontend test test-unit test-race test-fuzz test-e2e test-browser test-npm test-vscode test-install test-readme bench bench-full bench-cluster bench-page lint deps deps-browser deps-tools clean

all: build

$(CLIENT)/node_modules/.package-lock.json: $(CLIENT)/package.json $(CLIENT)/package-lock.json
	@echo "==> npm ci ($(CLIENT))"
	cd $(CLIENT) && npm ci --no-audit --no-fund

# @muxterm/client: the frontend imports its dist/ through node_modules (file:../packages/client).
client: $(CLIENT_STAMP)

$(CLIENT_STAMP): $(CLIENT)/node_modules/.package-lock.json $(CLIENT_SRC)
	@echo "==> @muxterm/client: typecheck and build $(CLIENT)/dist"
	cd $(CLIENT) && npm run --silent typecheck && npm run --silent build
	@touch $@

frontend/node_modules/.package-lock.json: frontend/package.json frontend/package-lock.json
	@echo "==> npm ci (frontend)"
	cd frontend && npm ci --no-audit --no-fund

frontend: $(FRONTEND_STAMP)

$(FRONTEND_STAMP): $(CLIENT_STAMP) frontend/node_modules/.package-lock.json $(FRONTEND_SRC)
	@echo "==> frontend: typecheck and build"
	cd frontend && npm run --silent typecheck && npm run --silent build
	@touch $@

build: frontend
	@echo "==> build $(BIN)"
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/gateway
	@echo "==> build $(CLI)"
	$(GO) build -ldflags "$(LDFLAGS)" -o $(CLI) ./cmd/muxterm

# A developer's gateway on loopback: any command may be opened (--allow-cmd '*'), since a
# read-write token can run anything from the shell anyway (docs/security.md); ARGS adds flags.
# Its pid is in bin/gateway-$(PORT).pid: kill -USR2 "$$(cat bin/gateway-8222.pid)" upgrades it.
RUN_FLAGS ?= --listen 127.0.0.1:$(PORT) --allow-cmd '*' --pid-file bin/gateway-$(PORT).pid
ARGS      ?=

run: build
	@echo "==> run on 127.0.0.1:$(PORT) (Ctrl-C stops it)"
	./$(BIN) $(RUN_FLAGS) $(ARGS)

# make install: bin/gateway and bin/muxterm into $(BINDIR): $(GOBIN) when set, else $(PREFIX)/bin.
PREFIX    ?= $(HOME)/.local
BINDIR    ?= $(if $(GOBIN),$(GOBIN),$(PREFIX)/bin)

install: build
	@echo "==> install gateway and muxterm into $(BINDIR)"
	install -d $(BINDIR)
	install -m 755 $(BIN) $(CLI) $(BINDIR)/

deps:
	@echo "==> go mod download"
	$(GO) mod download

deps-browser:
	@echo "==> chromium, tmux, asciinema, nginx and lrzsz (Debian packages: tmux is the real terminal of the CLI's e2e tests, asciinema plays the recordings back, nginx is the UI's reverse proxy, lrzsz's sz and rz are the other end of the UI's file transfers)"
	@(command -v chromium >/dev/null 2>&1 && command -v tmux >/dev/null 2>&1 && command -v asciinema >/dev/null 2>&1 && (command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx) && command -v sz >/dev/null 2>&1 && command -v rz >/dev/null 2>&1) || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium tmux asciinema nginx lrzsz)

# Jaeger v1.75.0's all-in-one, from a tools module of its own (tools/jaeger/go.mod; the main
# go.mod stays small): rebuilt only when that module changes. Its first build takes minutes
# (about 12 on a shared 2-core machine; the Go build cache makes the next ones short).
$(JAEGER): tools/jaeger/go.mod tools/jaeger/go.sum
	@echo "==> build $(JAEGER) (Jaeger v1.75.0 all-in-one, tools/jaeger)"
	cd tools/jaeger && $(GO) build -o $(CURDIR)/$(JAEGER) github.com/jaegertracing/jaeger/cmd/jaeger

deps-tools: $(JAEGER)
	@echo "==> prometheus and promtool (Debian's prometheus package: the e2e suite runs the dashboard's queries and the alerts' tests in them)"
	@(command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1) || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus)

test: test-unit test-fuzz test-e2e test-browser test-npm test-vscode test-install test-readme

test-unit: frontend deps deps-browser
	@echo "==> go test -race (unit and e2e packages)"
	$(GO) test $(GOFLAGS_T) ./...
	@echo "==> @muxterm/client unit tests (fake WebSocket)"
	cd $(CLIENT) && npm test --silent
	@echo "==> frontend unit tests (node --test: the ZMODEM sentry's gate against zmodem.js)"
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
	@echo "--- ./internal/vt/ FuzzWrite, $(VT_FUZZTIME) (each input is checked by a round trip through a snapshot)"
	$(GO) test -run '^$$' -fuzz '^FuzzWrite$$' -fuzztime $(VT_FUZZTIME) -fuzzminimizetime 200x ./internal/vt/

test-e2e: build deps-browser deps-tools
	@echo "==> e2e against the built binary"
	MUXTERM_BIN=$(CURDIR)/$(BIN) MUXTERM_CLI_BIN=$(CURDIR)/$(CLI) MUXTERM_JAEGER=$(CURDIR)/$(JAEGER) $(GO) test $(GOFLAGS_T) -tags e2e -skip 'Browser|^TestInstall$$|^TestReadmeCommands$$' ./e2e/

# The install routes README.md gives, each into a scratch directory outside the repository.
test-install: build
	@echo "==> install routes: make install (PREFIX, GOBIN), go install ./cmd/muxterm and ./cmd/... into scratch directories, also from a fresh clone"
	MUXTERM_BIN=$(CURDIR)/$(BIN) MUXTERM_CLI_BIN=$(CURDIR)/$(CLI) $(GO) test -count=1 -tags e2e -run '^TestInstall$$' ./e2e/

# Every sh block of README.md but those e2e/readme_test.go's readmeNotRun names (with why), in
# order, against a real make run, with HOME a scratch directory.
test-readme: build
	@echo "==> README.md's shell blocks against make run"
	$(GO) test -count=1 -tags e2e -run '^(TestReadmeCommands|TestMakeRunPassesArgs)$$' ./e2e/

test-browser: build deps-browser
	@echo "==> browser tests in headless Chromium"
	MUXTERM_BIN=$(CURDIR)/$(BIN) MUXTERM_BROWSER=1 $(GO) test -count=1 -tags e2e -run 'Browser' ./e2e/

test-npm: build
	@echo "==> @muxterm/client against the built binary (node --test, ws)"
	cd $(CLIENT) && MUXTERM_BIN=$(CURDIR)/$(BIN) npm run --silent test:gateway
	@echo "==> @muxterm/client: npm pack, install the tarball outside the repo, import and type-check it"
	cd $(CLIENT) && npm run --silent test:pack

$(VSCODE)/node_modules/.package-lock.json: $(VSCODE)/package.json $(VSCODE)/package-lock.json
	@echo "==> npm ci ($(VSCODE))"
	cd $(VSCODE) && npm ci --no-audit --no-fund

test-vscode: build $(VSCODE)/node_modules/.package-lock.json
	@echo "==> examples/vscode: typecheck against @types/vscode, adapter tests, the built extension against the binary"
	cd $(VSCODE) && npm run --silent typecheck && MUXTERM_BIN=$(CURDIR)/$(BIN) npm test --silent
	@echo "==> examples/vscode: vsce package (the pinned devDependency), the .vsix holds only package.json, README and dist/extension.js"
	cd $(VSCODE) && npm run --silent test:package

bench: build
	@echo "==> session benchmarks and muxbench -short (about 3 minutes)"
	$(GO) test -run '^$$' -bench . -benchtime 20x ./session/
	$(GO) run ./cmd/muxbench -short -gateway $(BIN) -json bench-results/muxbench-short.json -md bench-results/muxbench-short.md

bench-full: build
	@echo "==> muxbench, full run (about 8 minutes)"
	$(GO) run ./cmd/muxbench -gateway $(BIN) -json bench-results/muxbench-full.json -md bench-results/muxbench-full.md

# TTYD: a ttyd binary built outside the repository (scripts/build-ttyd.sh builds one from ttyd's
# public source in a scratch folder).
bench-page: build deps-browser
	@echo "==> page benchmark: muxterm's UI against ttyd's page in headless Chromium, both renderers, interleaved (about 10 minutes)"
	@test -n "$(TTYD)" || { echo "bench-page: set TTYD=/path/to/ttyd (scripts/build-ttyd.sh builds it in a scratch folder)" >&2; exit 2; }
	$(GO) run ./cmd/pagebench -gateway $(BIN) -ttyd $(TTYD) -json bench-results/page.json -md bench-results/page.md

bench-cluster: build
	@echo "==> cluster figures: three nodes with embedded NATS, relayed against local (muxbench -only cluster); the directory's write rate (about 1 minute)"
	$(GO) run ./cmd/muxbench -only cluster -reps 7 -gateway $(BIN) -json bench-results/muxbench-cluster.json -md bench-results/muxbench-cluster.md
	MUXTERM_FIGURES=1 $(GO) test -count=1 -v -run 'TestDirectoryFigures' ./cluster/ | grep -E 'FIGURE|^(ok|FAIL|---)'

lint: frontend
	@echo "==> gofmt, go vet, staticcheck"
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

clean:
	@echo "==> clean"
	rm -rf bin frontend/node_modules $(CLIENT)/node_modules $(CLIENT)/dist $(VSCODE)/node_modules $(VSCODE)/dist
	find frontend/dist -mindepth 1 ! -name .gitkeep -delete
