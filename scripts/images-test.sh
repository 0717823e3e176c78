#!/usr/bin/env bash
# make images-test: builds the images and drives them as a real
# multi-container cluster started from deploy/compose/compose.yaml
# (services/deploy/imagestest).
#
# The engine is Podman unless CONTAINER_ENGINE says otherwise: it needs no
# daemon (so nothing rewrites the host's firewall under the other tests)
# and its --privileged works where the machine's bounding set lacks a
# capability Docker asks for. The compose command is podman-compose for
# Podman and `docker compose` for Docker (CONCH_COMPOSE to choose).
#
# On a machine without registry access the base images are made locally
# (scripts/ci-base-images.sh); where Podman's defaults cannot start a
# container, a containers.conf that can is written
# (scripts/ci-podman-conf.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINER_ENGINE=${CONTAINER_ENGINE:-podman}
case "$CONTAINER_ENGINE" in
*podman) export CONCH_COMPOSE=${CONCH_COMPOSE:-podman-compose} ;;
*) export CONCH_COMPOSE=${CONCH_COMPOSE:-docker compose} ;;
esac
step() { printf '==> %s (%s)\n' "$*" "$(date -u +%H:%M:%S)" >&2; }

step "base images"
scripts/ci-base-images.sh debian
debian=docker.io/library/debian:trixie-slim
if [[ $CONTAINER_ENGINE == *podman && -z ${CONTAINERS_CONF:-} ]] &&
	! podman run --rm --pull=never --network=none "$debian" true >/dev/null 2>&1; then
	step "containers.conf for this machine"
	CONTAINERS_CONF=$(scripts/ci-podman-conf.sh "$debian")
	export CONTAINERS_CONF
fi
scripts/ci-base-images.sh

step "images"
make images CONTAINER_ENGINE="$CONTAINER_ENGINE"

step "multi-container cluster"
# The test also runs the deploy guide's client commands with bin/conch
# (docs/how-to/deploy.md).
make build
export CONCH_BIN=$PWD/bin/conch
export CONCH_IMAGES_TEST_LOGS=${CONCH_IMAGES_TEST_LOGS:-$PWD/.cache/images-test-logs}
rm -rf "$CONCH_IMAGES_TEST_LOGS"
cd services
go test -tags imagestest -count=1 -timeout 30m -v -run '^TestComposeCluster$' ./deploy/imagestest
