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
#                                                   losing it loses them, see docs/how-to/secrets.md)
#   minio.env      MinIO's root user and password   MinIO, minio-auth
#   workspace-s3.env  the workspace service's own   workspace, minio-auth
#                  MinIO user and CONCH_SIGNING_KEYS
#   audit-s3.env   the approval service's own       approval, minio-auth
#                  MinIO user (the audit trail)
#   responses-s3.env  the router's own MinIO user   routers, minio-auth
#                  (stored responses)
#
# minio-auth makes each service's user, limited to its own bucket; no
# service holds MinIO's root password. A storage.env of an older version
# (one key for all) gives minio.env its root user and the signing keys.
# Run on a secrets directory of an older version, it adds the files that
# version did not have (responses-s3.env) and changes none of the others.
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
old=$dir/storage.env
carry() { [ -e "$old" ] && grep "^$1=" "$old" || echo "$1=$2"; }
write minio.env <<END
$(carry MINIO_ROOT_USER conch)
$(carry MINIO_ROOT_PASSWORD "$(rand 32)")
END
write workspace-s3.env <<END
CONCH_S3_ACCESS_KEY=workspace
CONCH_S3_SECRET_KEY=$(rand 20)
$(carry CONCH_SIGNING_KEYS "k1:$(rand 32)")
END
write audit-s3.env <<END
CONCH_AUDIT_S3_ACCESS_KEY=approval
CONCH_AUDIT_S3_SECRET_KEY=$(rand 20)
END
write responses-s3.env <<END
CONCH_RESPONSES_S3_ACCESS_KEY=router
CONCH_RESPONSES_S3_SECRET_KEY=$(rand 20)
END
echo "$dir"
