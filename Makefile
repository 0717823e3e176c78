# conch — the newcomer's commands are `make run` and `make test`.

SHELL := /bin/bash
GO    ?= go
BIN   := bin/conch
# Test packages of every module with tests; gen and tools have none.
TEST_FLAGS ?= -count=1 -timeout 20m
BREAKING_AGAINST ?= .git\#branch=main

.PHONY: all build run test bench images lint gen breaking deps clean

all: build

## build: compile bin/conch
build:
	$(GO) build -o $(BIN) ./services/cmd/conch

## run: start the whole cluster on this machine (conch dev)
run: deps build
	./$(BIN) dev

## deps: install or name the system packages conch needs
deps:
	@scripts/deps.sh

## test: every test of every module, against real etcd, MinIO and sandboxes
test: build
	cd services && CONCH_BIN=$(CURDIR)/$(BIN) $(GO) test $(TEST_FLAGS) ./...

## bench: the performance benchmarks
bench: build
	cd services && CONCH_BIN=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench . -benchmem ./...

## images: build the container images (needs Docker with a running daemon)
IMAGE_TAG ?= latest
images:
	@docker info >/dev/null 2>&1 || { echo "make images: needs docker and a running Docker daemon"; exit 1; }
	docker build -t conch:$(IMAGE_TAG) .
	docker build --target executor -t conch-executor:$(IMAGE_TAG) .
	docker build -t conch-sandbox:$(IMAGE_TAG) deploy/sandbox

## gen: regenerate gen/ from proto/
gen:
	$(GO) tool buf generate

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
