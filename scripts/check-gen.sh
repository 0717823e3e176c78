#!/usr/bin/env bash
# Fails when `make gen` would change gen/ or the generated references
# (docs/reference/rest-api/, and what docgen writes:
# docs/reference/configuration.md and cli.md): generates into a scratch
# dir and compares, without touching the work tree.
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
mkdir "$tmp/docgen"
go run ./services/cmd/docgen -dir "$tmp/docgen"
for generated in "$tmp"/docgen/*; do
	ref=docs/reference/$(basename "$generated")
	if ! cmp -s "$generated" "$ref"; then
		echo "$ref is stale: run 'make gen' and commit it" >&2
		diff "$generated" "$ref" | head -40 >&2 || true
		exit 1
	fi
done
echo "generated code is current"
