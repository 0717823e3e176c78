#!/usr/bin/env bash
# import-graph.sh [PKG...] — the import graph among the given packages
# (default: the executor's and the agent binary's) as a Mermaid
# flowchart, from the code's own imports (go list; tests left out). Run
# from the repository's root:
#
#   scripts/import-graph.sh ./services/executor/... ./services/cmd/conch-sandbox-agent
set -euo pipefail
cd "$(dirname "$0")/../services"
pkgs=()
for p in "${@:-./executor/... ./cmd/conch-sandbox-agent}"; do
	for q in $p; do pkgs+=("./${q#./services/}"); done
done
mod="$(go list -f '{{.Module.Path}}' ./executor)/"
inside=" $(go list "${pkgs[@]}" | tr '\n' ' ') "
echo "flowchart TD"
go list -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' "${pkgs[@]}" | while read -r from imports; do
	for to in $imports; do
		[[ $inside == *" $to "* ]] || continue
		f=${from#"$mod"} t=${to#"$mod"}
		printf '  %s["%s"] --> %s["%s"]\n' "${f//[\/.-]/_}" "$f" "${t//[\/.-]/_}" "$t"
	done
done | sort -u
