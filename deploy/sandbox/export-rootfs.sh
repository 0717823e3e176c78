#!/bin/sh
# Copies the parts of this image that sandboxes see into $1. Symlinks stay
# symlinks (merged /usr), so the copy is about the size of /usr. Ownership is
# not kept when not run as root; the tree is read-only in sandboxes anyway.
set -eu

dst=${1:?usage: export-rootfs DIR}
for d in usr bin sbin lib lib32 lib64 libx32 etc; do
	if [ -e "/$d" ] || [ -L "/$d" ]; then
		cp -a "/$d" "$dst/"
	fi
done
echo "export-rootfs: copied to $dst" >&2
