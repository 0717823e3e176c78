#!/usr/bin/env bash
# Writes .cache/containers.conf (ignored by git) for Podman on a CI machine
# and prints its path, for CONTAINERS_CONF. Two things of such machines
# break Podman's defaults:
#   - a bounding set without CAP_SYS_RESOURCE: no container may raise an
#     rlimit above what Podman itself got, and Podman's defaults are higher;
#     containers get this shell's file limit and the largest process
#     limit that starts a container;
#   - hybrid cgroups (v1 controllers with a v2 mount), which crun refuses
#     to run on and runc accepts.
set -euo pipefail
cd "$(dirname "$0")/.."
conf="$PWD/.cache/containers.conf"
mkdir -p .cache
runtime=crun
if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ] && [ -d /sys/fs/cgroup/unified ]; then
	command -v runc >/dev/null || { echo "ci-podman-conf: hybrid cgroups need runc (apt-get install runc)" >&2; exit 1; }
	runtime=runc
fi
image=${1:?usage: ci-podman-conf.sh IMAGE (any local image, to probe limits with)}
files=$(ulimit -Hn)
procs=$(ulimit -Hu)
[ "$files" = unlimited ] && files=1048576
[ "$procs" = unlimited ] && procs=4194304
while ! podman --runtime "$runtime" run --rm --pull=never --network=none \
	--ulimit "nofile=$files:$files" --ulimit "nproc=$procs:$procs" "$image" true 2>/dev/null; do
	[ "$procs" -gt 1024 ] || { echo "ci-podman-conf: no container starts even with nproc=$procs" >&2; exit 1; }
	procs=$(( procs / 2 ))
done
cat >"$conf" <<CONF
# Written by scripts/ci-podman-conf.sh for this machine.
[containers]
default_ulimits = ["nofile=$files:$files", "nproc=$procs:$procs"]
[engine]
runtime = "$runtime"
CONF
echo "$conf"
