#!/usr/bin/env bash
# Fuzzes every fuzz target of the services module, one after another (Go
# fuzzes one target per run), each for FUZZTIME: a duration, or a count of
# executions (Nx). The targets are found in the sources, so a new one is
# fuzzed without being listed; FUZZ, a regular expression, picks some by
# name. Fails on the first target that fails, which leaves its input in
# that package's testdata/fuzz.
set -euo pipefail
cd "$(dirname "$0")/../services"
fuzztime=${FUZZTIME:?FUZZTIME is a duration or a count of executions (Nx)}
GO=${GO:-go}

targets=$(grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sed 's/:func /:/' | sort)
if [ -z "$targets" ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi
ran=0
for t in $targets; do
	file=${t%%:*} name=${t##*:}
	[[ $name =~ ${FUZZ:-.} ]] || continue
	pkg=./$(dirname "${file#./}")
	echo "==> $name ($pkg) for $fuzztime"
	"$GO" test -timeout 0 -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" -fuzzminimizetime 3s "$pkg"
	ran=$((ran + 1))
done
if [ "$ran" -eq 0 ]; then
	echo "fuzz: no fuzz target matches FUZZ=$FUZZ" >&2
	exit 1
fi
