// Package store is conch's object storage: workspaces and snapshots (the
// workspace service), stored responses and skills (the router) and the
// audit trail (the approval service) each keep their objects through it,
// in a bucket of their own. One small interface with an S3 implementation
// (s3store, for MinIO) and a local-directory one (fsstore, for conch dev).
// Both follow the same contract, checked by the storetest suite:
//
//   - keys are '/'-separated relative paths without empty, "." or ".."
//     segments; a key ending in '/' is a directory marker;
//   - a Put is atomic: the object is visible whole, with its metadata, or
//     not at all. A failed Put leaves nothing visible but when its last
//     step took effect though it failed to say so (fsstore: making its
//     rename durable failed; s3store: the pointer's answer was lost), and
//     then the object is whole; what it staged is left to Collect;
//   - a Put that returned nil survives a crash of the machine;
//   - a key and keys below it ("a" and "a/b") must not be stored together:
//     MinIO cannot list both, so callers keep files and directories apart;
//   - listings are sorted by key and page through any number of keys.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrNotFound is returned when an object does not exist.
var ErrNotFound = errors.New("store: object not found")

// ErrContentMismatch is returned by Put when the content does not match the
// expected size or SHA-256.
var ErrContentMismatch = errors.New("store: content does not match the expected size or hash")

// MaxKeyLen is the longest key CheckKey accepts, as in S3.
const MaxKeyLen = 1024

// PortableKeyLen is the longest key every implementation accepts (the S3
// store keeps room for its blob names).
const PortableKeyLen = 960

// Info describes a stored object, or a common prefix in a listing.
type Info struct {
	// Key is the object's key; it ends in '/' for directory markers and
	// common prefixes.
	Key string
	// Size is the content length in bytes.
	Size int64
	// Mode holds the permission bits.
	Mode uint32
	// ModTime is the modification time to report.
	ModTime time.Time
	// SHA256 is the hex SHA-256 of the content.
	SHA256 string
	// LinkTarget is set for symbolic links, which have no content.
	LinkTarget string
	// Prefix marks a common prefix of a non-recursive listing: keys exist
	// below it, but it may have no marker object of its own.
	Prefix bool
}

// IsDir reports whether the key names a directory (marker or prefix).
func (i Info) IsDir() bool { return strings.HasSuffix(i.Key, "/") }

// PutOptions describe an object to store.
type PutOptions struct {
	// Size is the exact content length, or -1 when unknown.
	Size int64
	// Mode holds the permission bits to keep.
	Mode uint32
	// ModTime is the modification time to keep.
	ModTime time.Time
	// SHA256, when set, is the expected hex SHA-256 of the content.
	SHA256 string
	// LinkTarget stores a symbolic link; the content must be empty.
	LinkTarget string
}

// Staged is content uploaded for a key but not yet visible there.
type Staged struct {
	// Key is the key the content is for.
	Key string
	// ID names the upload within the store.
	ID string
	// Size and SHA256 describe the content.
	Size   int64
	SHA256 string
}

// Store is an object store.
type Store interface {
	// Put stores the content of r under key, atomically.
	Put(ctx context.Context, key string, r io.Reader, opts PutOptions) (Info, error)
	// Stage uploads the content of r for key without making it visible:
	// large content is uploaded once, before the decision to publish it.
	// opts.Size and opts.SHA256, when set, must match.
	Stage(ctx context.Context, key string, r io.Reader, opts PutOptions) (Staged, error)
	// Publish makes staged content visible at its key with opts' mode and
	// time, atomically, replacing what was there.
	Publish(ctx context.Context, st Staged, opts PutOptions) (Info, error)
	// Discard drops staged content that will not be published.
	Discard(ctx context.Context, st Staged) error
	// Get opens an object's content.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// Stat returns an object's metadata.
	Stat(ctx context.Context, key string) (Info, error)
	// List lists the keys below prefix ("" or ending in '/'), sorted, the
	// prefix itself excluded. Non-recursive listings stop at the next '/'
	// and report what lies below it as one Prefix entry.
	List(ctx context.Context, prefix string, recursive bool) iter.Seq2[Info, error]
	// Delete deletes keys; keys that do not exist are ignored.
	Delete(ctx context.Context, keys []string) error
	// Collect removes staged content older than olderThan that no key
	// refers to: what a crash between Stage and Publish left behind. It
	// returns how many pieces it removed. Staged content younger than
	// olderThan is kept, so it must exceed the longest Stage-to-Publish.
	Collect(ctx context.Context, olderThan time.Duration) (int, error)
}

// CheckKey returns an error unless key is a valid object key.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKeyLen || !utf8.ValidString(key) {
		return fmt.Errorf("store: invalid key %q: must be 1-%d bytes of UTF-8", key, MaxKeyLen)
	}
	body := strings.TrimSuffix(key, "/")
	for seg := range strings.SplitSeq(body, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsRune(seg, 0) {
			return fmt.Errorf("store: invalid key %q: empty, \".\" or \"..\" segment or NUL", key)
		}
	}
	return nil
}

// CheckPrefix returns an error unless prefix is "" or a valid key ending in
// '/'.
func CheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("store: invalid prefix %q: must end in '/'", prefix)
	}
	return CheckKey(prefix)
}
