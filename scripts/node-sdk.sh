#!/usr/bin/env bash
# Installs the pinned official OpenAI SDK for Node into .cache/node (ignored
# by git) unless it is already there at that version, and prints the path of
# its node_modules. The e2e tests find it there, or through
# CONCH_NODE_MODULES. Needs node and npm (scripts/deps.sh --test).
set -euo pipefail
cd "$(dirname "$0")/.."
# Keep in step with the e2e test that drives it (services/e2e/nodesdk_test.go).
OPENAI_NODE_VERSION=7.59.0
dir="$PWD/.cache/node"
if [ "$(cat "$dir/openai.version" 2>/dev/null)" != "$OPENAI_NODE_VERSION" ]; then
	mkdir -p "$dir"
	npm install --prefix "$dir" --no-audit --no-fund --silent "openai@$OPENAI_NODE_VERSION" >&2
	echo "$OPENAI_NODE_VERSION" > "$dir/openai.version"
fi
echo "$dir/node_modules"
