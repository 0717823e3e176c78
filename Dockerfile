# Images of conch, built from the repository root with BuildKit (Docker with
# DOCKER_BUILDKIT=1, or Podman); `make images` builds them all:
#
#   docker build -t conch:latest .                              router, approval, workspace, etcd members
#   docker build --target executor -t conch-executor:latest .   executor (with bubblewrap)
#
# Sandboxes see the root filesystem of a third image, deploy/sandbox/Dockerfile.

ARG GO_VERSION=1.26.8
# OCI annotations of every image; `make images` passes the git describe and
# the commit.
ARG VERSION=dev
ARG REVISION=unknown

FROM golang:${GO_VERSION}-trixie AS build
ARG VERSION
ARG REVISION
WORKDIR /src
# Module files first so that dependency downloads stay cached across source edits.
COPY go.work go.work.sum ./
COPY gen/go.mod gen/go.sum gen/
COPY services/go.mod services/go.sum services/
COPY tools/go.mod tools/go.sum tools/
# Only the services module's dependencies: the workspace's tools module
# names Buf's generated plugin modules, which the module proxy refuses.
RUN --mount=type=cache,target=/go/pkg/mod \
    cd services && GOWORK=off go mod download
COPY gen gen
COPY services services
# Static binaries: conch runs in the scratch image, in the executor image
# and, copied by the executor, as the tool commands inside every sandbox;
# conch-sandbox-agent, beside it in the executor image, is each sandbox's
# resident agent (the agent alone, quick to start).
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false \
        -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${REVISION}" \
        -o /out/conch ./services/cmd/conch && \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w" \
        -o /out/conch-sandbox-agent ./services/cmd/conch-sandbox-agent
# The runtime image has no shell or package manager, so its user and CA
# roots are prepared here.
RUN mkdir -p /out/etc /out/data && \
    echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' > /out/etc/passwd && \
    echo 'nonroot:x:65532:' > /out/etc/group

# executor: bubblewrap builds the sandboxes, and the executor itself runs as
# root in its pod (see deploy/k8s/base/executor.yaml for why and how little
# else it gets).
FROM debian:trixie-slim AS executor
RUN apt-get update && \
    apt-get install -y --no-install-recommends bubblewrap ca-certificates && \
    rm -rf /var/lib/apt/lists/*
COPY --from=build /out/conch /out/conch-sandbox-agent /usr/local/bin/
# After the packages, so that a new version reuses their layer.
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title=conch-executor \
      org.opencontainers.image.description="conch executor: sandboxes with bubblewrap" \
      org.opencontainers.image.source=https://github.com/conch-sh/conch \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION}
COPY deploy/executor/entrypoint.sh /usr/local/bin/conch-executor-entrypoint
ENTRYPOINT ["/usr/local/bin/conch-executor-entrypoint"]
CMD ["executor"]

# The default image: the static binary, CA roots for upstream model APIs, and
# an unprivileged user. Last, so that a plain `docker build .` builds it.
FROM scratch AS conch
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title=conch \
      org.opencontainers.image.description="conch: router, approval, workspace and etcd members" \
      org.opencontainers.image.source=https://github.com/conch-sh/conch \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION}
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/passwd /out/etc/group /etc/
COPY --from=build /out/conch /usr/local/bin/conch
# Where an etcd member or a workspace on local disk keeps its data: owned by
# the unprivileged user, so that a volume mounted there starts out so too.
COPY --from=build --chown=65532:65532 /out/data /var/lib/conch
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/conch"]
CMD ["help"]
