// Package seal encrypts the secrets conch stores in etcd (upstream API
// keys, egress secrets, tool header values, chat tokens), so that a copy of
// etcd's data shows none of them (docs/how-to/secrets.md).
//
// A value is sealed in an envelope: a fresh random 256-bit data key
// encrypts it with AES-256-GCM, and a key-encryption key (KEK) of the
// keyring encrypts the data key, also with AES-256-GCM. The envelope names
// the KEK by its id, so every stored value says which key sealed it. The
// value is bound to where it is stored (its etcd key and field, the
// associated data of Seal and Open): moved to another record or field, it
// no longer opens.
//
// A sealed value is text, so that it fits in any string field:
//
//	sealed:v1:<key id>:<base64url of nonce(12) | wrapped data key(48) | nonce(12) | ciphertext and tag>
//
// A keyring holds one active key, which seals, and any number of older
// keys, which still open what they sealed. Its text form, in a key file or
// in CONCH_SECRETS_KEY, is one key per line (commas also separate keys, so
// that a keyring fits on one line of an env file):
//
//	# the first key seals; every key opens
//	k2:Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmE=
//	k1:cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmE=
//
// An id is 1-32 characters of [A-Za-z0-9_-]; a key is 32 random bytes in
// standard base64 (head -c 32 /dev/urandom | base64). Blank lines and
// lines starting with # are ignored.
//
// Rotation: add the new key second, everywhere; then move it first; then
// re-seal every stored value with it (conch secrets rotate), and only then
// remove the old key.
package seal
