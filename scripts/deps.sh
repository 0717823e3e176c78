#!/usr/bin/env bash
# Installs the system packages conch needs to run, or names them when it
# cannot install (not root, or no apt-get).
set -euo pipefail

need=()
command -v go >/dev/null || { echo "conch needs Go 1.26 or later: https://go.dev/dl/" >&2; exit 1; }
command -v bwrap >/dev/null || need+=(bubblewrap)
# The sandbox tests run python3 inside sandboxes (threads, sockets, ioctls),
# from the system's /usr/bin, which is what a sandbox sees.
[ -x /usr/bin/python3 ] || need+=(python3)
# --test adds what only the tests need: a headless browser for the
# approvals page, Node with npm for the official OpenAI SDK for Node
# (scripts/node-sdk.sh), and a C compiler with libc's headers for the race
# detector, which make test runs every package under and which needs cgo.
if [ "${1:-}" = "--test" ]; then
	command -v gcc >/dev/null || need+=(gcc)
	[ -e /usr/include/stdlib.h ] || need+=(libc6-dev)
	command -v chromium >/dev/null || need+=(chromium)
	command -v node >/dev/null || need+=(nodejs)
	command -v npm >/dev/null || need+=(npm)
	# The file watch test reads its server-sent events with curl.
	command -v curl >/dev/null || need+=(curl)
	# The sandbox storage tests make btrfs filesystems on loop devices.
	command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
fi
# --images adds what `make images-test` needs: Podman and podman-compose,
# runc (for hosts with hybrid cgroups, which crun refuses) and debootstrap
# (for the local base images of machines without registry access).
if [ "${1:-}" = "--images" ]; then
	command -v podman >/dev/null || need+=(podman)
	command -v podman-compose >/dev/null || need+=(podman-compose)
	command -v runc >/dev/null || need+=(runc)
	command -v debootstrap >/dev/null || need+=(debootstrap)
fi

[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
	echo "installing: ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
else
	echo "conch needs these packages; install them and retry: ${need[*]}" >&2
	echo "  e.g. sudo apt-get install ${need[*]}" >&2
	exit 1
fi
