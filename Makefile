# conch — the newcomer's commands are `make run` and `make test`.

SHELL := /bin/bash
GO    ?= go
BIN   := bin/conch
# Test packages of every module with tests; gen and tools have none. All
# run under the race detector: nearly all start goroutines, and on two
# cores it adds about 30% to the tests' run time (summed over packages),
# besides compiling every package again, instrumented.
TEST_FLAGS ?= -count=1 -race -timeout 20m
BREAKING_AGAINST ?= .git\#branch=main

.PHONY: all build run cluster cluster-down load test fuzz bench images images-test lint gen breaking deps clean

all: build

## build: compile bin/conch, and beside it the sandbox agent the executor
## prefers (conch-sandbox-agent: the agent alone, static so that it starts
## without a dynamic loader, as the executor image builds it)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
build:
	$(GO) build -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(BIN) ./services/cmd/conch
	CGO_ENABLED=0 $(GO) build -o $(dir $(BIN))conch-sandbox-agent ./services/cmd/conch-sandbox-agent

## run: start the whole cluster on this machine (conch dev)
run: deps build
	./$(BIN) dev

## cluster: a cluster of processes on loopback (3 etcd members, MinIO, two of each service), in the background
CLUSTER_DIR ?= .cluster
cluster: deps build
	$(GO) run ./services/cmd/conch-cluster up -dir $(CLUSTER_DIR) -conch $(BIN) -minio "$${CONCH_MINIO_BIN:-$$(scripts/minio.sh)}"

## cluster-down: stop the cluster `make cluster` started
cluster-down:
	$(GO) run ./services/cmd/conch-cluster down -dir $(CLUSTER_DIR)

## load: drive the cluster of `make cluster` (started if needed): a sustained phase, then an overload phase
LOAD_CLIENTS  ?= 8
LOAD_TIME     ?= 60s
LOAD_OVERLOAD ?= 64
LOAD_REPORT   ?= load-report.json
load: cluster
	$(GO) run ./services/cmd/conchload -cluster $(CLUSTER_DIR) -concurrency $(LOAD_CLIENTS) -duration $(LOAD_TIME) \
		-overload $(LOAD_OVERLOAD) -overload-duration 15s -json $(LOAD_REPORT)

## deps: install or name the system packages conch needs
deps:
	@scripts/deps.sh

## test: every test of every module, with the race detector, against real
## etcd, MinIO and sandboxes, then a bounded run of every fuzz target
test: build
	cd services && CONCH_BIN=$(CURDIR)/$(BIN) $(GO) test $(TEST_FLAGS) ./...
	$(MAKE) fuzz FUZZTIME=$(TEST_FUZZTIME)

## fuzz: every fuzz target, found in the sources, one after another, each
## for $(FUZZTIME); FUZZ=regexp picks targets by name. The exec policy's
## (FuzzEngineVersusShell) runs every command the engine allows as its plan
## under dash and bash, and a program or argv it did not judge fails the
## run. make test's run counts executions rather than time: with a
## duration, Go 1.26's fuzz coordinator can report its own deadline as a
## failure (go.dev/issue/75804, fixed in Go 1.27); 200000 of each take
## about a minute and a half in all on two cores.
FUZZTIME      ?= 2m
TEST_FUZZTIME ?= 200000x
fuzz:
	FUZZTIME='$(FUZZTIME)' FUZZ='$(FUZZ)' GO='$(GO)' scripts/fuzz.sh

BENCH_OUT    ?= bench.txt
BENCH_REPORT ?= bench-report.json
# One package at a time (-p 1): two packages' benchmarks at once would
# compete for the CPU and the disk, and each would measure the other. Vetting
# later packages would compete too; vet is make lint's job.
BENCH_TEST    = cd services && CONCH_BIN=$(CURDIR)/$(BIN) $(GO) test -p 1 -vet=off -run '^$$' -benchmem
# Pool creation refills the pool, untimed, after each timed take: ~20 ms
# for well under 1 ms timed, so a 1s benchtime would take half a minute. It
# runs a fixed count instead.
BENCH_POOL    = ^BenchmarkSandboxCreate$$
# A Responses/chat round is three completions with a shell call, ~60 ms: a
# 1s benchtime would give p50s of some 20 each, which swing by more than
# the 10 % they are compared at. It runs 102 rounds instead: 17 of each
# of the six orders of its three kinds. The Messages/chat rounds are two
# completions each, as many rounds.
BENCH_ROUNDS  = ^(BenchmarkShellResponseVsChat|BenchmarkMessagesVsChat)$$

## bench: every benchmark, its output kept in $(BENCH_OUT), then one report
## of the metrics against their floors and targets, also as JSON
bench: build
	@set -o pipefail; status=0; \
	{ ($(BENCH_TEST) -bench . -skip '$(BENCH_POOL)|$(BENCH_ROUNDS)' ./...) || s=1; \
	  ($(BENCH_TEST) -bench '$(BENCH_POOL)' -benchtime 300x ./executor/sandbox) || s=1; \
	  ($(BENCH_TEST) -bench '$(BENCH_ROUNDS)' -benchtime 102x ./e2e) || s=1; \
	  exit $${s:-0}; } 2>&1 | tee $(BENCH_OUT) || status=1; \
	echo; $(GO) run ./services/cmd/benchreport -json $(BENCH_REPORT) $(BENCH_OUT) || status=1; \
	exit $$status

## images: the container images conch, conch-executor, conch-sandbox and
## conch-minio, with BuildKit: Docker (DOCKER_BUILDKIT=1) when its daemon
## answers, else Podman; CONTAINER_ENGINE=… to choose. Docker's own BuildKit
## builds without buildx up to Docker 22 (Debian's docker.io); later Docker
## CLIs need the buildx plugin for it.
IMAGE_TAG        ?= latest
CONTAINER_ENGINE ?= $(shell docker info >/dev/null 2>&1 && echo docker || echo podman)
MINIO_VERSION    := $(shell sed -n 's/^MINIO_VERSION=//p' scripts/minio.sh)
IMAGE_BUILD       = $(if $(filter docker,$(notdir $(CONTAINER_ENGINE))),DOCKER_BUILDKIT=1 )$(CONTAINER_ENGINE) build \
	--build-arg VERSION=$(VERSION) --build-arg REVISION=$(COMMIT)
images:
	@command -v $(CONTAINER_ENGINE) >/dev/null || { echo "make images: needs Docker (with its daemon) or Podman"; exit 1; }
	$(IMAGE_BUILD) --target conch -t conch:$(IMAGE_TAG) .
	$(IMAGE_BUILD) --target executor -t conch-executor:$(IMAGE_TAG) .
	$(IMAGE_BUILD) -t conch-sandbox:$(IMAGE_TAG) deploy/sandbox
	$(IMAGE_BUILD) --build-arg MINIO_VERSION=$(MINIO_VERSION) -t conch-minio:$(IMAGE_TAG) deploy/minio
	@$(CONTAINER_ENGINE) images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '(^|/)conch(-[a-z]+)?:$(IMAGE_TAG) '

## images-test: make images, then drive them as a real multi-container
## cluster started from deploy/compose/compose.yaml (Podman and
## podman-compose unless CONTAINER_ENGINE=docker); see scripts/images-test.sh
images-test:
	scripts/images-test.sh

## gen: regenerate gen/ (Go) and docs/reference/rest-api/ (OpenAPI) from
## proto/, docs/reference/configuration.md from the settings' tags and
## docs/reference/cli.md from the CLI's help
gen:
	$(GO) tool buf generate
	$(GO) run ./services/cmd/docgen -dir docs/reference

## lint: gofmt, go vet, buf lint, buf breaking and generated code up to date
lint:
	@out=$$(gofmt -l services gen tools); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./services/... ./gen/...
	$(GO) tool buf lint
	$(GO) tool buf format --diff --exit-code
	@if git rev-parse --verify -q main >/dev/null && git cat-file -e main:buf.yaml 2>/dev/null; then \
		$(GO) tool buf breaking --against '$(BREAKING_AGAINST)'; fi
	@scripts/check-gen.sh

## breaking: buf breaking against $(BREAKING_AGAINST)
breaking:
	$(GO) tool buf breaking --against '$(BREAKING_AGAINST)'

clean:
	rm -rf bin
