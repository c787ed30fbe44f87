# latchd: `make run` starts a server on 127.0.0.1:6388 (REST on 6389);
# `make test` is what CI runs.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
# A count, not a duration: a duration-based -fuzztime races the fuzz
# coordinator's own deadline in Go 1.26 (golang/go#75804) and fails with
# "context deadline exceeded" on a loaded machine with no crasher.
FUZZTIME  ?= 300000x
PKGS      := ./...

.PHONY: all build run test fmtcheck vet leafcheck race fuzz bench lint soak chaos bench-cluster clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/latchd ./cmd/latchd
	@if [ -d cmd/latchd-bench ]; then $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/latchd-bench ./cmd/latchd-bench; fi

run: build
	$(BIN)/latchd --host 127.0.0.1 --port 6388 --http-port 6389

test: fmtcheck vet leafcheck race fuzz

fmtcheck:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# The leaf packages import nothing outside the standard library (and each
# other, as docs/architecture.md allows).
leafcheck:
	@MOD=$$($(GO) list -m); \
	bad=$$($(GO) list -deps ./codec ./engine ./fence | grep '\.' | grep -v '^vendor/' \
	  | grep -v "^$$MOD/\(codec\|engine\|fence\)$$" || true); \
	if [ -n "$$bad" ]; then echo "leaf package imports: $$bad"; exit 1; fi

race:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

# A short coverage-guided run of each codec fuzz target on top of the
# committed corpus (which plain `go test` already replays).
fuzz:
	@for f in $$($(GO) test -list 'Fuzz.*' ./codec | grep '^Fuzz'); do \
	  echo "fuzz $$f for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) ./codec || exit 1; \
	done

# Go benchmarks of the hot paths (and the hot-key hand-off over real
# connections), then the whole-system tables: latchd and the no-op ceiling
# (and Redis, when redis-server is installed) side by side, then one key
# shared by every worker (contended, sem).
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1s ./engine ./codec
	$(GO) test -run '^$$' -bench HotKey -benchtime 20000x ./server
	bash bench/run.sh

# The long reliability suite: bounded, loopback only, prints a report per
# test. `make test` runs the short version (under -race).
# A three-node cluster of real processes on loopback, nodes killed with
# SIGKILL and restarted under load, the history checked for
# linearizability. CHAOS_DURATION (default 40s) and CHAOS_KILL_EVERY (4s).
# The bench table against a three-node cluster on loopback (fsync on),
# beside a single node; WORKERS, ROUNDS, MODE as for bench.
bench-cluster:
	bench/cluster.sh

chaos:
	$(GO) test -tags chaos -count=1 -timeout 15m -run Chaos -v ./chaos

soak:
	$(GO) test -tags soak -run . -count=1 -timeout 30m -v ./soak/

lint: fmtcheck vet leafcheck

clean:
	rm -rf $(BIN)
