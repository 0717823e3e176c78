#!/usr/bin/env bash
# Fails when `make gen` would change gen/ or the generated references
# (docs/reference/rest-api/, docs/reference/configuration.md): generates into a scratch dir and compares, without touching
# the work tree.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go tool buf generate -o "$tmp"
for dir in gen docs/reference/rest-api; do
	if ! diff -r -q -x go.mod -x go.sum "$tmp/$dir" "$dir" >/dev/null; then
		echo "generated code is stale: run 'make gen' and commit $dir/" >&2
		diff -r -x go.mod -x go.sum "$tmp/$dir" "$dir" | head -40 >&2 || true
		exit 1
	fi
done
go run ./services/cmd/docgen -o "$tmp/configuration.md"
if ! cmp -s "$tmp/configuration.md" docs/reference/configuration.md; then
	echo "docs/reference/configuration.md is stale: run 'make gen' and commit it" >&2
	diff "$tmp/configuration.md" docs/reference/configuration.md | head -40 >&2 || true
	exit 1
fi
echo "generated code is current"
