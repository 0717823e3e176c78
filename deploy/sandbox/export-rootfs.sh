#!/bin/bash
# Copies the parts of this image that sandboxes see into $1: /usr, /bin,
# /sbin, /lib* and /etc. Symlinks stay symlinks (merged /usr). Run as an
# unprivileged user, it keeps no ownership (the tree is read-only in
# sandboxes anyway) and leaves out what that user cannot read, such as
# /etc/shadow: sandboxes never see it.
set -euo pipefail

dst=${1:?usage: export-rootfs DIR}
cd /
dirs=()
for d in usr bin sbin lib lib32 lib64 libx32; do
	if [[ -e $d || -L $d ]]; then
		dirs+=("$d")
	fi
done
tar -cf - "${dirs[@]}" | tar -xf - -C "$dst"
tar -cf - --ignore-failed-read etc 2>/dev/null | tar -xf - -C "$dst"
test -e "$dst/bin/sh" || { echo "export-rootfs: $dst/bin/sh missing after copy" >&2; exit 1; }
echo "export-rootfs: copied to $dst" >&2
