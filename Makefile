# olcd — build, test and run targets. `make help` lists them.

GO      ?= go
PREFIX  ?= /usr/local
DESTDIR ?=
BIN     := bin/olcd
VERSION ?= $(shell git describe --always --dirty --tags 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: all help generate check-generate build test test-short demo install uninstall bench fmt vet

all: build

help:
	@echo "make build           build bin/olcd (no clang needed: BPF objects are committed)"
	@echo "make test            vet + every test (root runs the BPF, netns and cgroup tests)"
	@echo "make demo            run olcd on its embedded default against a netns+veth test node"
	@echo "make generate        recompile bpf/*.c with bpf2go (needs clang, llvm, libbpf-dev)"
	@echo "make check-generate  regenerate and fail if the committed objects differ"
	@echo "make bench           datapath, sampler and controller benchmarks"
	@echo "make install         install binary, unit and /etc/olcd/olcd.yaml, enable the service"
	@echo "make uninstall       remove everything make install added"

generate:
	$(GO) generate ./internal/loader/...

check-generate: generate
	@git diff --exit-code --stat -- internal/loader || \
		{ echo "bpf2go output differs from the committed files: run 'make generate' and commit"; exit 1; }

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/olcd

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')

test: build vet
	$(GO) test -count=1 -timeout 20m ./...
	scripts/check-unit.sh
	scripts/test-install.sh

test-short:
	$(GO) test -short -count=1 ./...

demo: build
	scripts/demo.sh

bench:
	scripts/bench.sh

install: build
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" scripts/install.sh $(BIN)

uninstall:
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" scripts/uninstall.sh
