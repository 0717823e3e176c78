#!/usr/bin/env bash
# Builds the pinned MinIO server into .cache/bin (ignored by git) unless it
# is already there at that version, and prints its path. Tests and
# `make cluster` find it there, or through CONCH_MINIO_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
# Keep in step with miniotest.Version in services/internal/store/miniotest.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
bin="$PWD/.cache/bin/minio"
if [ ! -x "$bin" ] || [ "$(cat .cache/minio.version 2>/dev/null)" != "$MINIO_VERSION" ]; then
	mkdir -p .cache/bin
	GOBIN="$PWD/.cache/bin" GOWORK=off go install "github.com/minio/minio@$MINIO_VERSION" >&2
	echo "$MINIO_VERSION" > .cache/minio.version
fi
echo "$bin"
