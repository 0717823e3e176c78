#!/usr/bin/env bash
# Installs the pinned official OpenAI and Anthropic SDKs for Node into .cache/node (ignored
# by git) unless it is already there at that version, and prints the path of
# its node_modules. The e2e tests find it there, or through
# CONCH_NODE_MODULES. Needs node and npm (scripts/deps.sh --test).
set -euo pipefail
cd "$(dirname "$0")/.."
# Keep in step with the e2e tests that drive them (services/e2e/nodesdk_test.go):
# the OpenAI SDK, the OpenAI Agents SDK, Anthropic's SDK, and Vercel's AI SDK
# with its OpenAI and Anthropic providers.
OPENAI_NODE_VERSION=7.60.0
AGENTS_VERSION=0.20.0
AI_SDK_VERSION=7.0.185
AI_SDK_OPENAI_VERSION=4.0.126
ANTHROPIC_SDK_VERSION=1.17.0
AI_SDK_ANTHROPIC_VERSION=4.0.112
want="openai@$OPENAI_NODE_VERSION @openai/agents@$AGENTS_VERSION ai@$AI_SDK_VERSION @ai-sdk/openai@$AI_SDK_OPENAI_VERSION @anthropic-ai/sdk@$ANTHROPIC_SDK_VERSION @ai-sdk/anthropic@$AI_SDK_ANTHROPIC_VERSION"
dir="$PWD/.cache/node"
if [ "$(cat "$dir/versions" 2>/dev/null)" != "$want" ]; then
	mkdir -p "$dir"
	# shellcheck disable=SC2086 # several package specs
	npm install --prefix "$dir" --no-audit --no-fund --silent $want >&2
	echo "$want" > "$dir/versions"
fi
echo "$dir/node_modules"
