# olcd — build, test and run targets. `make help` lists them.

GO      ?= go
PREFIX  ?= /usr/local
DESTDIR ?=
BIN     := bin/olcd
VERSION ?= $(shell git describe --always --dirty --tags 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all help deps-run deps-test deps-build deps-all generate check-generate build test test-short test-overload test-lb demo demo-full demo-default install uninstall bench fmt vet

all: build

help:
	@echo "make build           build bin/olcd (no clang needed: BPF objects are committed)"
	@echo "make test            vet + every test (root runs the BPF, netns and cgroup tests, then"
	@echo "                     the overload suite alone: make test-overload, ~15 min)"
	@echo "make test-lb         the load-balancer test alone: two nodes behind Debian's HAProxy, with and"
	@echo "                     without olcd's agent (root, ~4 min; part of test-overload; out/test-lb)"
	@echo "make test-short      go test -short: skips the end-to-end and overload tests"
	@echo "make test-overload   the overload suite alone (root, ~15 min; results in out/test-overload)"
	@echo "make demo            overload demo, the headline of the matrix: a CPU-bound backend under vegeta"
	@echo "                     and under 64 blocking clients, nginx + php-fpm under vegeta, the cold"
	@echo "                     start; each with no olcd, olcd enforce, nftables limit (root, ~11 min)"
	@echo "make demo-full       the whole matrix: backends cpu, pool, php x clients open-giveup, open-retry,"
	@echo "                     closed-pool, MariaDB x connect-per-query clients, cold start,"
	@echo "                     capacity-halved (root, ~50 min; out/demo-full)"
	@echo "make demo-default    olcd on its embedded default config against a netns+veth node (~1 min)"
	@echo "make deps-test       install the system packages make test needs (deps-run: make demo,"
	@echo "                     deps-build: make generate; scripts/deps.sh says which)"
	@echo "make generate        recompile bpf/*.c with bpf2go (needs clang, llvm, libbpf-dev)"
	@echo "make check-generate  regenerate and fail if the committed objects differ"
	@echo "make bench           datapath, sampler and controller benchmarks"
	@echo "make install         install binary, unit and /etc/olcd/olcd.yaml, enable the service"
	@echo "make uninstall       remove everything make install added"

# One list of system packages (scripts/deps.sh): installed when missing as
# root with apt, else named in one line.
deps-run deps-test deps-build deps-all: deps-%:
	scripts/deps.sh $*

generate: deps-build
	$(GO) generate ./internal/loader/...

check-generate: generate
	@git diff --exit-code --stat -- internal/loader || \
		{ echo "bpf2go output differs from the committed files: run 'make generate' and commit"; exit 1; }

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/olcd

# The pure packages (the vocabulary, config, controller, plant model) build
# on any OS, so `olcd simulate`'s parts and their tests run on a laptop:
# vet checks them for darwin too.
PURE := ./internal/olc/... ./internal/rules/... ./internal/adaptive/... ./internal/plant/...

vet:
	$(GO) vet ./...
	GOOS=darwin $(GO) vet $(PURE)

fmt:
	gofmt -l -w $$(git ls-files '*.go')

test: deps-test build vet
	$(GO) test -count=1 -timeout 20m ./...
	scripts/check-unit.sh
	scripts/test-install.sh
	$(MAKE) test-overload

# The overload suite measures goodput and latency with real traffic, so it
# runs on its own, never beside other packages' tests. Without root its tests
# skip with the reason. Results and plots: out/test-overload/.
test-overload:
	OLCD_OVERLOAD=1 OLCD_OVERLOAD_OUT=$(CURDIR)/out/test-overload \
		$(GO) test -count=1 -v -timeout 25m -run 'TestOverload' ./tests/e2e/

# The load-balancer test alone (it is also part of test-overload).
test-lb:
	OLCD_OVERLOAD=1 OLCD_OVERLOAD_OUT=$(CURDIR)/out/test-lb \
		$(GO) test -count=1 -v -timeout 15m -run 'TestOverloadLB' ./tests/e2e/

test-short:
	$(GO) test -short -count=1 ./...

# The demos' php backend is Debian's nginx + php-fpm: deps.sh test lists
# them (and installs nothing that is there).
demo demo-full:
	@[ "$$(id -u)" = 0 ] || { echo "make $@ needs root (network namespace, veth, cgroup, nftables, BPF): run 'sudo make $@'" >&2; exit 1; }
	scripts/deps.sh test
	$(MAKE) build
	$(GO) build -o bin/olcd-overload ./tests/e2e/cmd/olcd-overload
	bin/olcd-overload demo -set $(if $(filter demo-full,$@),full,headline) -olcd $(BIN) -out out/$@

demo-default: build
	scripts/demo.sh

bench:
	scripts/bench.sh

install: build
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" scripts/install.sh $(BIN)

uninstall:
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" scripts/uninstall.sh
