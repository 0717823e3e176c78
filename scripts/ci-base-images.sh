#!/usr/bin/env bash
# Makes local stand-ins for the base images the Dockerfiles name, for CI
# machines that reach Debian's package repository and the Go module proxy
# but no container registry:
#
#   debian:trixie-slim            debootstrap --variant=minbase trixie, imported
#   golang:<GO_VERSION>-trixie    that, plus ca-certificates and git from
#                                 Debian and the Go toolchain module from the
#                                 module proxy
#
# Both are tagged with the names a pull would give them
# (docker.io/library/…), so builds with --pull=never find them. An image
# that is already there is kept. The Dockerfiles stay standard: a machine
# with registry access pulls the real images and never runs this.
#
# The machine's trusted CA roots (which may hold a proxy's CA) go into the
# Go stand-in only, as a separate file named by SSL_CERT_FILE, so that
# `go mod download` works behind such a proxy; the Debian bundle the
# shipped images copy stays Debian's own.
#
# Usage: scripts/ci-base-images.sh [debian]
# The engine is CONTAINER_ENGINE (podman, the default, or docker); with
# `debian`, only the Debian image is made, which runs no container.
set -euo pipefail
cd "$(dirname "$0")/.."
engine=${CONTAINER_ENGINE:-podman}
only=${1:-}
go_version=$(sed -n 's/^ARG GO_VERSION=//p' Dockerfile)
arch=$(go env GOARCH)
debian=docker.io/library/debian:trixie-slim
golang=docker.io/library/golang:${go_version}-trixie

have() { "$engine" image inspect "$1" >/dev/null 2>&1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! have "$debian"; then
	command -v debootstrap >/dev/null || { echo "ci-base-images: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
	echo "ci-base-images: debootstrap trixie → $debian" >&2
	debootstrap --variant=minbase --arch="$(dpkg --print-architecture)" trixie "$work/root" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
		{ tail -20 "$work/debootstrap.log" >&2; exit 1; }
	# As in Debian's slim images: no package lists or caches left behind.
	rm -rf "$work"/root/var/lib/apt/lists/* "$work"/root/var/cache/apt/*.bin "$work"/root/var/cache/apt/archives/*.deb
	tar -C "$work/root" -c . | "$engine" import \
		--change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		- "$debian" >/dev/null
	rm -rf "$work/root"
fi

if [ "$only" != debian ] && ! have "$golang"; then
	echo "ci-base-images: $debian + Go $go_version → $golang" >&2
	dir=$(GOWORK=off GOFLAGS=-modcacherw go mod download -json "golang.org/toolchain@v0.0.1-go${go_version}.linux-${arch}" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$dir" ] || { echo "ci-base-images: Go toolchain module not downloaded" >&2; exit 1; }
	mkdir -p "$work/ctx"
	cp -a "$dir" "$work/ctx/go"
	# Module zips keep no file modes: the programs are made executable as
	# the go command does when it switches to a downloaded toolchain.
	chmod -R u+w "$work/ctx/go"
	chmod +x "$work"/ctx/go/bin/* "$work"/ctx/go/pkg/tool/*/*
	cp /etc/ssl/certs/ca-certificates.crt "$work/ctx/host-ca.crt"
	cat >"$work/ctx/Containerfile" <<-EOF
		FROM $debian
		RUN apt-get update && \
		    apt-get install -y --no-install-recommends ca-certificates git && \
		    rm -rf /var/lib/apt/lists/*
		COPY host-ca.crt /usr/local/share/ci-ca/ca.crt
		COPY go /usr/local/go
		ENV SSL_CERT_FILE=/usr/local/share/ci-ca/ca.crt GOTOOLCHAIN=local GOPATH=/go \
		    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
		WORKDIR /go
	EOF
	build=(build)
	[ "$engine" = podman ] && build+=(--pull=never)
	"$engine" "${build[@]}" -q -t "$golang" -f "$work/ctx/Containerfile" "$work/ctx" >/dev/null
fi
echo "ci-base-images: ready" >&2
