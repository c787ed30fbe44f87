# latchd: `make run` starts a server on 127.0.0.1:6388 (REST on 6389);
# `make test` is what CI runs.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
BUILDINFO := github.com/latchd/latchd/internal/buildinfo
LDFLAGS   := -s -w -X $(BUILDINFO).Version=$(VERSION) -X $(BUILDINFO).Commit=$(COMMIT)
# make dist: static binaries (no cgo) for these GOOS/GOARCH pairs.
DIST      := dist
PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64
CMDS      := latchd latchctl latchd-bench
# A count, not a duration: a duration-based -fuzztime races the fuzz
# coordinator's own deadline in Go 1.26 (golang/go#75804) and fails with
# "context deadline exceeded" on a loaded machine with no crasher.
FUZZTIME  ?= 300000x
PKGS      := ./...

.PHONY: all build dist run test fmtcheck vet leafcheck race fuzz bench lint soak chaos nemesis nemesis-slice upgrade bench-cluster clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/latchd ./cmd/latchd
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/latchctl ./cmd/latchctl
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/latchd-bench ./cmd/latchd-bench

# Versioned static binaries and checksums: dist/latchd-<version>-<os>-<arch>.tar.gz
# holding latchd, latchctl and latchd-bench, LICENSE and README.md.
dist:
	@rm -rf $(DIST) && mkdir -p $(DIST)
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; name=latchd-$(VERSION)-$$os-$$arch; \
	  mkdir -p $(DIST)/$$name; \
	  for c in $(CMDS); do \
	    echo "build $$name/$$c"; \
	    CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(DIST)/$$name/$$c ./cmd/$$c; \
	  done; \
	  cp LICENSE README.md $(DIST)/$$name/; \
	  tar -C $(DIST) -czf $(DIST)/$$name.tar.gz $$name; \
	  rm -rf $(DIST)/$$name; \
	done
	@cd $(DIST) && sha256sum *.tar.gz > SHA256SUMS && cat SHA256SUMS

run: build
	$(BIN)/latchd --host 127.0.0.1 --port 6388 --http-port 6389

test: fmtcheck vet leafcheck race fuzz nemesis-slice

fmtcheck:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# The tagged suites (make chaos, soak, nemesis) are vetted too, so that a
# change to what they call fails here, not only when they run.
vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags "chaos soak nemesis" $(PKGS)

# The leaf packages import nothing outside the standard library (and each
# other, as docs/architecture.md allows).
leafcheck:
	@MOD=$$($(GO) list -m); \
	bad=$$($(GO) list -deps ./codec ./engine ./fence ./stats | grep '\.' | grep -v '^vendor/' \
	  | grep -v "^$$MOD/\(codec\|engine\|fence\|stats\)$$" || true); \
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

# A three-node cluster of the previous release (built from git history,
# offline) replaced node by node with this one under load, the history
# checked for linearizability; make test runs it with 1.5s per step.
# UPGRADE_DWELL sets the load per step (default 10s here), UPGRADE_FROM the
# commit to upgrade from.
upgrade:
	UPGRADE_DWELL=$${UPGRADE_DWELL:-10s} $(GO) test -count=1 -timeout 15m -run RollingUpgrade -v ./chaos

# Faults on a three-node cluster in network namespaces (root; skips
# otherwise): partitions (isolated, minority, bridge, one-way, flapping),
# a slow and lossy link, pauses, kill -9, slow and full disks, membership
# changes, run-under-lock, and combinations; docs/cluster.md, "What we
# test". NEMESIS_DURATION sets the length (default 12m, the full matrix
# several times; 90s covers its first ten faults).
nemesis:
	$(GO) test -tags nemesis -count=1 -timeout 40m -run Nemesis -v ./nemesis

# The slice of make nemesis that make test runs: 75 s of faults. It
# skips, with the reason, where it cannot make namespaces (not root).
nemesis-slice:
	NEMESIS_DURATION=75s $(GO) test -tags nemesis -count=1 -timeout 10m -run Nemesis -v ./nemesis

soak:
	$(GO) test -tags soak -run . -count=1 -timeout 30m -v ./soak/

lint: fmtcheck vet leafcheck

clean:
	rm -rf $(BIN) $(DIST)
