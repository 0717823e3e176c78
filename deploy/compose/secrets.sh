#!/bin/sh
# Writes the env files deploy/compose/compose.yaml reads its secrets from,
# with fresh random values, into DIR (default: deploy/compose/secrets,
# ignored by git). Existing files are kept: run it again after deleting one
# to rotate what it holds.
#
#   internal.env   CONCH_INTERNAL_SECRET            every conch service
#   router.env     CONCH_ADMIN_KEY                  routers: the admin's API key
#   sealing.env    CONCH_SECRETS_KEY                routers, approval: the key that
#                                                   seals stored secrets (id:base64key;
#                                                   losing it loses them, see the README)
#   storage.env    MinIO's root user and password,  MinIO, workspace, approval
#                  the S3 keys of the services that
#                  use it, and CONCH_SIGNING_KEYS
#
# etcd's certificates are not here: the Compose file's etcd-pki service
# makes them into a volume of their own.
set -eu
dir=${1:-$(dirname "$0")/secrets}
mkdir -p "$dir"
umask 077
rand() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
write() { [ -e "$dir/$1" ] || cat >"$dir/$1"; }
write internal.env <<END
CONCH_INTERNAL_SECRET=$(rand 32)
END
write router.env <<END
CONCH_ADMIN_KEY=$(rand 24)
END
write sealing.env <<END
CONCH_SECRETS_KEY=k1:$(head -c 32 /dev/urandom | base64)
END
s3=$(rand 32)
write storage.env <<END
MINIO_ROOT_USER=conch
MINIO_ROOT_PASSWORD=$s3
CONCH_S3_ACCESS_KEY=conch
CONCH_S3_SECRET_KEY=$s3
CONCH_AUDIT_S3_ACCESS_KEY=conch
CONCH_AUDIT_S3_SECRET_KEY=$s3
CONCH_SIGNING_KEYS=k1:$(rand 32)
END
echo "$dir"
