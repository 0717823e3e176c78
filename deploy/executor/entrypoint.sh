#!/bin/sh
# Entrypoint of the executor image.
#
# On cgroup v2 the container's own cgroup is the root of what the executor
# sees, and a cgroup that holds processes cannot hand controllers to child
# groups. The executor makes one child group per sandbox under
# /sys/fs/cgroup/conch and enables memory, pids and cpu there, so it first
# moves itself into a leaf group of its own. On cgroup v1 nothing is needed.
set -eu

cg=/sys/fs/cgroup
if [ "$(stat -fc %T "$cg" 2>/dev/null || true)" = cgroup2fs ]; then
	mkdir -p "$cg/executor"
	echo $$ >"$cg/executor/cgroup.procs"
fi
exec /usr/local/bin/conch "$@"
