# olcd — build, test and run targets. `make help` lists them.

GO      ?= go
PREFIX  ?= /usr/local
DESTDIR ?=
BIN     := bin/olcd
SIM     := bin/olcd-sim
VERSION ?= $(shell git describe --always --dirty --tags 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all help deps-run deps-test deps-build deps-all generate check-generate build test test-short test-overload test-lb demo demo-full demo-default install uninstall bench fmt vet lint

all: build

help:
	@echo "make build           build bin/olcd (the daemon and its CLI) and bin/olcd-sim (simulate,"
	@echo "                     plots; no root, any OS); no clang needed: BPF objects are committed"
	@echo "make test            vet + every test (root runs the BPF, netns and cgroup tests, then"
	@echo "                     the overload suite alone: make test-overload, ~12 min; ~21-25 min"
	@echo "                     in all on 2 cores), ending with a summary (out/make-test.log)"
	@echo "make test-lb         the load-balancer test alone: two nodes behind Debian's HAProxy, with and"
	@echo "                     without olcd's agent and HAProxy alone, connection per request and server"
	@echo "                     keep-alive (root, ~5 min; test-overload runs its agent line; out/test-lb)"
	@echo "make test-short      go test -short: skips the end-to-end and overload tests"
	@echo "make test-overload   the overload suite alone (root, ~12 min; results in out/test-overload)"
	@echo "make demo            overload demo, the headline of the matrix: a CPU-bound backend under vegeta"
	@echo "                     and under 64 blocking clients, nginx + php-fpm under vegeta, the cold"
	@echo "                     start; each with no olcd, olcd enforce, nftables limit (root, ~8 min)"
	@echo "make demo-full       the whole matrix: backends cpu, pool, php x clients open-giveup, open-retry,"
	@echo "                     closed-pool, cpu and php x 600 keep-alive clients, MariaDB x"
	@echo "                     connect-per-query clients, cold start,"
	@echo "                     capacity-halved (root, ~45 min; out/demo-full); REPEAT=3 runs it three"
	@echo "                     times and prints each cell's min / median / max"
	@echo "make demo-default    olcd on its embedded default config against a netns+veth node (~1 min)"
	@echo "make deps-test       install the system packages make test needs (deps-run: make demo,"
	@echo "                     deps-build: make generate; scripts/deps.sh says which)"
	@echo "make generate        recompile bpf/*.c with bpf2go and the pinned clang-14 (deps-build)"
	@echo "make check-generate  regenerate and fail if the committed objects differ"
	@echo "make vet             go vet (also for darwin: the pure packages), golangci-lint, clang-format"
	@echo "make lint            golangci-lint alone (.golangci.yaml; docs/lint.md)"
	@echo "make bench           datapath, sampler and controller benchmarks"
	@echo "make install         install olcd and olcd-sim, unit and /etc/olcd/olcd.yaml, enable the service"
	@echo "make uninstall       remove everything make install added"
	@echo "make release VERSION=vX.Y.Z  dist/: tarballs, .debs, OCI image, SHA256SUMS (from that tag)"
	@echo "make docs-board      docs/img/board.png: the Grafana board drawn from Prometheus scraping olcd"
	@echo "                     through a real overload (root, ~4 min; out/board)"
	@echo "make test-release    the release on a fresh Debian 12 chroot, sums, image read back, and"
	@echo "                     the README's install and first-ten-minutes commands walked (root, ~2 min)"

# One list of system packages (scripts/deps.sh): installed when missing as
# root with apt, else named in one line.
deps-run deps-demo deps-test deps-build deps-all: deps-%:
	scripts/deps.sh $*

# The pinned compiler: Debian bookworm's clang 14.0.6 (scripts/deps.sh
# build installs clang-14 and llvm-14), against the libbpf headers vendored
# in bpf/include/bpf (scripts/update-libbpf-headers.sh), so that the objects
# are the same bytes on any machine (docs/lint.md). bpf2go reads the
# compiler and strip tool from these variables.
BPF_CC    ?= clang-14
BPF_STRIP ?= llvm-strip-14
BPF_CC_VERSION := 14.0.6

generate: deps-build
	@$(BPF_CC) --version | grep -q ' version $(BPF_CC_VERSION)' || \
		echo "generate: note: $(BPF_CC) is not clang $(BPF_CC_VERSION), which made the committed objects: they may differ" >&2
	BPF2GO_CC=$(BPF_CC) BPF2GO_STRIP=$(BPF_STRIP) $(GO) generate ./internal/loader/...

check-generate: generate
	@git diff --exit-code --stat -- internal/loader || \
		{ echo "bpf2go output differs from the committed files: run 'make generate' and commit"; exit 1; }

# Two binaries: the root daemon links no plotting library; olcd-sim holds
# the replay and its plots (docs/internals.md).
build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/olcd
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(SIM) ./cmd/olcd-sim

# The pure packages (the vocabulary, config, controller, plant model) build
# on any OS, so `olcd-sim simulate`'s parts and their tests run on a laptop:
# vet checks them for darwin too.
PURE := ./internal/olc/... ./internal/rules/... ./internal/strictyaml/... ./internal/adaptive/... ./internal/pressure/... ./internal/plant/... ./cmd/olcd-sim/...

# golangci-lint at the version tools/lint/go.mod pins, kept out of olcd's own
# module (its dependencies are not olcd's); .golangci.yaml and docs/lint.md
# say what it checks. The first run compiles it (a few minutes), later runs
# use the build cache.
GOLANGCI := $(GO) tool -modfile=tools/lint/go.mod golangci-lint

# bpf/'s own C (not the vendored headers in bpf/include), in the style of
# .clang-format; scripts/deps.sh test installs clang-format-14.
CLANG_FORMAT ?= clang-format-14
BPF_SRC      := $(wildcard bpf/*.c bpf/*.h)

vet:
	$(GO) vet ./...
	GOOS=darwin $(GO) vet $(PURE)
	$(GOLANGCI) run ./...
	@command -v $(CLANG_FORMAT) >/dev/null || { echo "vet: $(CLANG_FORMAT) missing: run 'scripts/deps.sh test'" >&2; exit 1; }
	$(CLANG_FORMAT) --dry-run -Werror $(BPF_SRC)

lint:
	$(GOLANGCI) run ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')
	$(CLANG_FORMAT) -i $(BPF_SRC)

# Each step's output also goes to out/make-test.log, which the run's last
# lines sum up (scripts/test-log.sh): every step passed, and the GOAL MISSED
# lines of the whole run, or none. A failing step stops make there as
# before, with its own output last. Steps run through env, so that GO may
# carry variables (make test GO='GOFLAGS=-race go').
TEST_LOG := out/make-test.log

test: deps-test build vet
	@mkdir -p $(dir $(TEST_LOG)) && : >$(TEST_LOG)
	scripts/test-log.sh run $(TEST_LOG) env $(GO) test -count=1 -timeout 20m ./...
	scripts/test-log.sh run $(TEST_LOG) scripts/check-unit.sh
	scripts/test-log.sh run $(TEST_LOG) scripts/test-install.sh
	scripts/test-log.sh run $(TEST_LOG) $(MAKE) test-overload
	@scripts/test-log.sh summary $(TEST_LOG)

# The overload suite measures goodput and latency with real traffic, so it
# runs on its own, never beside other packages' tests. Without root its tests
# skip with the reason. Results and plots: out/test-overload/.
test-overload:
	OLCD_OVERLOAD=1 OLCD_OVERLOAD_OUT=$(CURDIR)/out/test-overload \
		$(GO) test -count=1 -v -timeout 30m -run 'TestOverload' ./tests/e2e/

# The load-balancer test alone, with its comparisons (olcd without the
# agent, HAProxy alone); test-overload runs its line, the agent's, alone.
test-lb:
	OLCD_OVERLOAD=1 OLCD_LB_COMPARISONS=1 OLCD_OVERLOAD_OUT=$(CURDIR)/out/test-lb \
		$(GO) test -count=1 -v -timeout 15m -run 'TestOverloadLB' ./tests/e2e/

test-short:
	$(GO) test -short -count=1 ./...

# The demos' php backend is Debian's nginx + php-fpm: deps.sh demo lists
# them beside the run group (and installs nothing that is there); the whole
# matrix's db backend is MariaDB, in the test group.
# REPEAT=3 runs the set three times (out/$@, out/$@-2, out/$@-3; the later
# runs take the first one's calibration) and prints each cell's min /
# median / max over the runs (olcd-overload repeats).
REPEAT ?= 1
demo demo-full:
	@[ "$$(id -u)" = 0 ] || { echo "make $@ needs root (network namespace, veth, cgroup, nftables, BPF): run 'sudo make $@'" >&2; exit 1; }
	scripts/deps.sh $(if $(filter demo-full,$@),test,demo)
	$(MAKE) build
	$(GO) build -o bin/olcd-overload ./tests/e2e/cmd/olcd-overload
	bin/olcd-overload demo -set $(if $(filter demo-full,$@),full,headline) -olcd $(BIN) -out out/$@
	@for i in $$(seq 2 $(REPEAT)); do \
		bin/olcd-overload demo -set $(if $(filter demo-full,$@),full,headline) -olcd $(BIN) -calibration out/$@/results.json -out out/$@-$$i || exit 1; \
	done
	@[ "$(REPEAT)" = 1 ] || bin/olcd-overload repeats out/$@ $$(seq -f 'out/$@-%g' 2 $(REPEAT))

demo-default: build
	scripts/demo.sh

bench:
	scripts/bench.sh

install: build
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" scripts/install.sh $(BIN) $(SIM)

uninstall:
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" scripts/uninstall.sh

# --- Releases (issue 28; docs/release.md) -----------------------------------
# tools/release is its own module (nfpm, go-containerregistry): nothing of
# it is linked into olcd. `make release VERSION=v0.1.0` needs that tag at a
# clean HEAD; dist/ gets per architecture a tarball, a .deb and an image
# tarball, one multi-arch OCI archive, and SHA256SUMS.
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
LDFLAGS += -X main.commit=$(COMMIT)

.PHONY: release test-release deps-demo docs-img docs-board

release:
	$(GO) -C tools/release run . -root $(CURDIR) -out $(CURDIR)/dist \
		-version $(VERSION) -commit $(COMMIT) -ldflags "$(LDFLAGS)"

# A test release on a fresh Debian 12 chroot (root; ~2 min with the chroot
# and build caches warm, ~5 min cold): scripts/test-release.sh, which ends
# with the README walk, scripts/test-release-first10.sh.
test-release:
	scripts/test-release.sh

# The README's pictures: the loop (graphviz's dot, only to change it) and
# the plant model at 3 C with and without olcd (tools/demoplot).
docs-img: build
	@mkdir -p out/docs-img
	$(SIM) simulate --config docs/img/demo-none.yaml --plant cpu-open-giveup-3x --out out/docs-img/none.csv
	$(SIM) simulate --config docs/img/demo-olcd.yaml --plant cpu-open-giveup-3x --out out/docs-img/olcd.csv
	$(GO) run ./tools/demoplot -none out/docs-img/none.csv -olcd out/docs-img/olcd.csv -out docs/img/demo.png \
		-title "cpu backend (C = 1000/s), open-loop clients giving up after 1 s: plant model"
	dot -Tpng -Gdpi=96 docs/img/loop.dot -o docs/img/loop.png

# The README's picture of the Grafana board (root, ~4 min): an overload of
# the cpu backend with olcd enforcing on deploy/examples/bare-metal.yaml,
# scraped every second by Debian's Prometheus with olcd's rules, every
# panel of deploy/grafana/olcd.json drawn from it by tools/board
# (docs/development.md, "The board's picture"). Prometheus's data stays in
# out/board/prometheus; tools/boardplot draws again from it.
docs-board:
	@[ "$$(id -u)" = 0 ] || { echo "make $@ needs root (network namespace, veth, cgroup, BPF): run 'sudo make $@'" >&2; exit 1; }
	scripts/deps.sh test
	$(MAKE) build
	$(GO) build -o bin/olcd-overload ./tests/e2e/cmd/olcd-overload
	bin/olcd-overload board -olcd $(BIN) -out out/board -png docs/img/board.png
