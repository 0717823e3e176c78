// Package s3store is the S3 implementation of store.Store, for MinIO.
//
// Metadata lives in the objects' user metadata so that one listing (MinIO's
// list-with-metadata extension) returns a whole workspace's manifest. Small
// content is kept in the object itself. Large content is uploaded once, as
// a blob under ".blobs/<key>/<id>", and published by a small pointer object
// at the key that carries the metadata, the SHA-256 computed while the blob
// streamed, and the blob's id: S3 cannot rename, and a server-side copy
// would write every byte twice. Blobs of a key that no pointer names any
// more are removed when the key is written or deleted again.
//
// MinIO keeps a directory marker ("a/b/") on disk under its last segment
// and a 9-byte suffix of its own, so a marker whose last segment is longer
// than 246 bytes cannot be stored as it is. Such a marker is the object
// "a/b/\x01" instead: no key may hold a "\x01" segment, and that object
// lists right where "a/b/" would. Every other key is its own object name.
package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/conch-sh/conch/services/internal/store"
)

// Metadata names (x-amz-meta-*).
const (
	metaMode   = "Conch-Mode"
	metaMtime  = "Conch-Mtime"
	metaSHA256 = "Conch-Sha256"
	metaLink   = "Conch-Link"
	metaBlob   = "Conch-Blob"
	metaSize   = "Conch-Size"
)

// blobPrefix holds the content of large objects.
const blobPrefix = ".blobs/"

// uploadSuffix names the marker kept beside a blob while its multipart
// upload runs. It is no blob id, so Collect takes an old one for garbage.
const uploadSuffix = ".upload"

const (
	// inlineLimit is the largest content kept in the object itself.
	inlineLimit = 4 << 20
	// partSize is the multipart part size for content of unknown size,
	// which bounds the memory of such an upload.
	partSize = 8 << 20
	// maxSinglePut is S3's largest single PUT.
	maxSinglePut = 5 << 30
	// blobIDLen is the length of a blob id.
	blobIDLen = 32
)

// MaxKeyLen is the longest key this store accepts: S3's limit less the
// blob prefix and id.
const MaxKeyLen = 1024 - len(blobPrefix) - 1 - blobIDLen

// Options configure the S3 store.
type Options struct {
	// Endpoint is host:port of the S3 service.
	Endpoint string
	// AccessKey and SecretKey are the credentials.
	AccessKey, SecretKey string
	// Bucket holds every workspace; it is created if missing.
	Bucket string
	// Secure selects HTTPS.
	Secure bool
	// Region is the bucket's region; empty means the server's default.
	Region string
}

// Store is an S3 bucket.
type Store struct {
	c      *minio.Client
	bucket string
}

var _ store.Store = (*Store)(nil)

// New connects to the S3 service and creates the bucket if it is missing.
func New(ctx context.Context, o Options) (*Store, error) {
	if o.Endpoint == "" || o.Bucket == "" {
		return nil, errors.New("s3store: Endpoint and Bucket are required")
	}
	tr, err := minio.DefaultTransport(o.Secure)
	if err != nil {
		return nil, fmt.Errorf("s3store: transport: %w", err)
	}
	tr.MaxIdleConnsPerHost = 64
	c, err := minio.New(o.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(o.AccessKey, o.SecretKey, ""),
		Secure:    o.Secure,
		Region:    o.Region,
		Transport: tr,
	})
	if err != nil {
		return nil, fmt.Errorf("s3store: client: %w", err)
	}
	exists, err := c.BucketExists(ctx, o.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3store: check bucket %s: %w", o.Bucket, err)
	}
	if !exists {
		if err := c.MakeBucket(ctx, o.Bucket, minio.MakeBucketOptions{Region: o.Region}); err != nil {
			var resp minio.ErrorResponse
			if !errors.As(err, &resp) || resp.Code != "BucketAlreadyOwnedByYou" {
				return nil, fmt.Errorf("s3store: create bucket %s: %w", o.Bucket, err)
			}
		}
	}
	return &Store{c: c, bucket: o.Bucket}, nil
}

func checkKey(key string) error {
	if err := store.CheckKey(key); err != nil {
		return err
	}
	if len(key) > MaxKeyLen || strings.HasPrefix(key, blobPrefix) || strings.Contains("/"+key+"/", "/"+longMarker+"/") {
		return fmt.Errorf("s3store: invalid key %q: longer than %d bytes or reserved", key, MaxKeyLen)
	}
	return nil
}

const (
	// dirSegmentMax is the longest last segment MinIO keeps a directory
	// marker under: Linux's NAME_MAX less its "__XLDIR__" suffix.
	dirSegmentMax = 255 - len("__XLDIR__")
	// longMarker is the object below a directory that stands for its
	// marker when the marker's own name is too long for MinIO.
	longMarker = "\x01"
)

// objectName is the object that holds key.
func objectName(key string) string {
	dir, ok := strings.CutSuffix(key, "/")
	if ok && len(dir)-strings.LastIndexByte(dir, '/')-1 > dirSegmentMax {
		return key + longMarker
	}
	return key
}

// keyOf is the key an object holds.
func keyOf(name string) string {
	if k, ok := strings.CutSuffix(name, "/"+longMarker); ok {
		return k + "/"
	}
	return name
}

// Put stores r under key: inline when small, else as a blob and a pointer.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, o store.PutOptions) (store.Info, error) {
	if err := checkKey(key); err != nil {
		return store.Info{}, err
	}
	if r == nil {
		r = bytes.NewReader(nil)
	}
	if o.LinkTarget != "" || strings.HasSuffix(key, "/") {
		extra, err := io.ReadAll(io.LimitReader(r, 1))
		if err != nil {
			return store.Info{}, fmt.Errorf("s3store: put %s: read: %w", key, err)
		}
		if len(extra) != 0 || o.Size > 0 {
			return store.Info{}, fmt.Errorf("s3store: put %s: links and directories have no content: %w", key, store.ErrContentMismatch)
		}
		o.SHA256, o.Size = "", 0
		return s.putInline(ctx, key, nil, o)
	}
	buf := &bytes.Buffer{}
	n := int64(0)
	if o.Size < 0 || o.Size <= inlineLimit {
		var err error
		if n, err = io.Copy(buf, io.LimitReader(r, inlineLimit+1)); err != nil {
			return store.Info{}, fmt.Errorf("s3store: put %s: read: %w", key, err)
		}
		if n <= inlineLimit {
			sum := sha256.Sum256(buf.Bytes())
			hexSum := hex.EncodeToString(sum[:])
			if err := check(o, n, hexSum); err != nil {
				return store.Info{}, fmt.Errorf("s3store: put %s: %w", key, err)
			}
			o.SHA256, o.Size = hexSum, n
			return s.putInline(ctx, key, buf.Bytes(), o)
		}
	}
	st, err := s.Stage(ctx, key, io.MultiReader(buf, r), o)
	if err != nil {
		return store.Info{}, err
	}
	// A failed publish keeps its blob: the pointer's PUT may have reached
	// MinIO though its answer did not (MinIO killed or paused after it
	// wrote), and discarding the blob would leave a pointer to nothing.
	// Collect removes the blob if no pointer names it.
	return s.Publish(ctx, st, o)
}

func (s *Store) putInline(ctx context.Context, key string, data []byte, o store.PutOptions) (store.Info, error) {
	_, err := s.c.PutObject(ctx, s.bucket, objectName(key), bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{
		UserMetadata: userMeta(o, ""), ContentType: "application/octet-stream", DisableMultipart: true,
	})
	if err != nil {
		return store.Info{}, fmt.Errorf("s3store: put %s: %w", key, err)
	}
	s.dropBlobs(ctx, key, "")
	return infoOf(key, o), nil
}

// Stage uploads r as a blob of key, hashing it on the way.
func (s *Store) Stage(ctx context.Context, key string, r io.Reader, o store.PutOptions) (store.Staged, error) {
	if err := checkKey(key); err != nil {
		return store.Staged{}, err
	}
	if strings.HasSuffix(key, "/") || o.LinkTarget != "" {
		return store.Staged{}, fmt.Errorf("s3store: stage %s: only files have content", key)
	}
	id := randomID()
	bk := blobKey(key, id)
	h := sha256.New()
	cr := &exactReader{r: io.TeeReader(r, h), want: o.Size}
	size := int64(-1)
	// The blob's SHA-256 is computed here, once, for its record; the
	// client would compute it again to sign each request's payload
	// (and MinIO again to check that signature). The transfer is
	// checked all the same: each request carries the CRC32C of its
	// bytes, which MinIO verifies, and TLS where it is on.
	opts := minio.PutObjectOptions{PartSize: partSize, ContentType: "application/octet-stream", DisableContentSha256: true}
	// A known size streams in one request without buffering; an unknown
	// one buffers one part at a time.
	if o.Size >= 0 && o.Size <= maxSinglePut {
		size, opts.DisableMultipart = o.Size, true
	}
	if !opts.DisableMultipart {
		// The next part is read while the last one uploads, so that a
		// reader that is itself a stream (a snapshot's archive) does
		// not wait on each part's round trip: two parts, 16 MiB.
		opts.ConcurrentStreamParts, opts.NumThreads = true, 2
		// A multipart upload cut by a crash keeps its parts, which no
		// listing of objects shows; the marker lets Collect find it.
		marker := bk + uploadSuffix
		if _, err := s.c.PutObject(ctx, s.bucket, marker, bytes.NewReader(nil), 0, minio.PutObjectOptions{DisableMultipart: true}); err != nil {
			return store.Staged{}, fmt.Errorf("s3store: stage %s: %w", key, err)
		}
		defer s.remove(context.WithoutCancel(ctx), marker)
	}
	if _, err := s.c.PutObject(ctx, s.bucket, bk, cr, size, opts); err != nil {
		s.remove(context.WithoutCancel(ctx), bk)
		if !opts.DisableMultipart {
			// The client aborts a failed multipart upload itself, but
			// only once and without saying whether that worked.
			_ = s.c.RemoveIncompleteUpload(context.WithoutCancel(ctx), s.bucket, bk)
		}
		if cr.err != nil {
			err = cr.err
		}
		return store.Staged{}, fmt.Errorf("s3store: stage %s: %w", key, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := check(o, cr.n, sum); err != nil {
		s.remove(context.WithoutCancel(ctx), bk)
		return store.Staged{}, fmt.Errorf("s3store: stage %s: %w", key, err)
	}
	return store.Staged{Key: key, ID: id, Size: cr.n, SHA256: sum}, nil
}

// Publish puts the pointer to a staged blob at its key.
func (s *Store) Publish(ctx context.Context, st store.Staged, o store.PutOptions) (store.Info, error) {
	if err := checkKey(st.Key); err != nil {
		return store.Info{}, err
	}
	if len(st.ID) != blobIDLen {
		return store.Info{}, fmt.Errorf("s3store: publish %s: not a staged upload", st.Key)
	}
	// The blob must still be there: one collected as garbage (a publish
	// long after its stage) would leave a pointer to nothing.
	if bi, err := s.c.StatObject(ctx, s.bucket, blobKey(st.Key, st.ID), minio.StatObjectOptions{}); err != nil || bi.Size != st.Size {
		return store.Info{}, fmt.Errorf("s3store: publish %s: the staged upload is gone (%v); write it again", st.Key, err)
	}
	o.Size, o.SHA256, o.LinkTarget = st.Size, st.SHA256, ""
	_, err := s.c.PutObject(ctx, s.bucket, st.Key, bytes.NewReader(nil), 0, minio.PutObjectOptions{
		UserMetadata: userMeta(o, st.ID), ContentType: "application/octet-stream", DisableMultipart: true,
	})
	if err != nil {
		return store.Info{}, fmt.Errorf("s3store: publish %s: %w", st.Key, err)
	}
	s.dropBlobs(ctx, st.Key, st.ID)
	return infoOf(st.Key, o), nil
}

// Discard deletes a staged blob.
func (s *Store) Discard(ctx context.Context, st store.Staged) error {
	if checkKey(st.Key) != nil || len(st.ID) != blobIDLen {
		return nil
	}
	if err := s.c.RemoveObject(ctx, s.bucket, blobKey(st.Key, st.ID), minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("s3store: discard %s: %w", st.Key, err)
	}
	return nil
}

// Collect removes blobs older than olderThan that their key's pointer does
// not name, and aborts the multipart uploads a crash left unfinished.
func (s *Store) Collect(ctx context.Context, olderThan time.Duration) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	named := map[string]string{} // key → the blob its pointer names ("" none)
	var garbage []string
	for oi := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: blobPrefix, Recursive: true}) {
		if oi.Err != nil {
			return 0, fmt.Errorf("s3store: collect: list blobs: %w", oi.Err)
		}
		if !oi.LastModified.Before(cutoff) {
			continue
		}
		rest := strings.TrimPrefix(oi.Key, blobPrefix)
		key, id := path.Dir(rest), path.Base(rest)
		blob, ok := named[key]
		if !ok {
			pi, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
			switch {
			case err == nil:
				_, blob = fromObject(pi, pi.UserMetadata)
			case !errors.Is(notFound(err), store.ErrNotFound):
				return 0, fmt.Errorf("s3store: collect: stat %s: %w", key, err)
			}
			named[key] = blob
		}
		if blob != id {
			garbage = append(garbage, oi.Key)
		}
	}
	if err := s.removeAll(ctx, garbage); err != nil {
		return 0, fmt.Errorf("s3store: collect: %w", err)
	}
	for _, k := range garbage {
		// A crash during a multipart upload left its marker: abort the
		// upload, whose parts no listing of objects shows. MinIO cannot
		// list incomplete uploads by prefix, only by object name.
		if blob, ok := strings.CutSuffix(k, uploadSuffix); ok {
			if err := s.c.RemoveIncompleteUpload(ctx, s.bucket, blob); err != nil {
				return 0, fmt.Errorf("s3store: collect: abort the upload of %s: %w", blob, err)
			}
		}
	}
	return len(garbage), nil
}

// dropBlobs deletes the blobs of key except keep; failures leave garbage
// for the next write or delete of the key, never a wrong file.
func (s *Store) dropBlobs(ctx context.Context, key, keep string) {
	ctx = context.WithoutCancel(ctx)
	var old []string
	for oi := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: blobPrefix + key + "/", Recursive: true}) {
		if oi.Err != nil {
			return
		}
		if path.Base(oi.Key) != keep {
			old = append(old, oi.Key)
		}
	}
	if len(old) > 0 {
		_ = s.removeAll(ctx, old)
	}
}

// Get opens key's content, following a pointer to its blob.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	if err := checkKey(key); err != nil {
		return nil, store.Info{}, err
	}
	obj, err := s.c.GetObject(ctx, s.bucket, objectName(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, store.Info{}, fmt.Errorf("s3store: get %s: %w", key, notFound(err))
	}
	oi, err := obj.Stat()
	if err != nil {
		_ = obj.Close()
		return nil, store.Info{}, fmt.Errorf("s3store: get %s: %w", key, notFound(err))
	}
	info, blob := fromObject(oi, oi.UserMetadata)
	info.Key = key
	if blob == "" {
		return obj, info, nil
	}
	_ = obj.Close()
	b, err := s.c.GetObject(ctx, s.bucket, blobKey(key, blob), minio.GetObjectOptions{})
	if err != nil {
		return nil, store.Info{}, fmt.Errorf("s3store: get %s: blob: %w", key, err)
	}
	bi, err := b.Stat()
	if err != nil || bi.Size != info.Size {
		_ = b.Close()
		return nil, store.Info{}, fmt.Errorf("s3store: get %s: blob %s missing or of the wrong size: %v", key, blob, err)
	}
	return b, info, nil
}

// Stat returns key's metadata.
func (s *Store) Stat(ctx context.Context, key string) (store.Info, error) {
	if err := checkKey(key); err != nil {
		return store.Info{}, err
	}
	oi, err := s.c.StatObject(ctx, s.bucket, objectName(key), minio.StatObjectOptions{})
	if err != nil {
		return store.Info{}, fmt.Errorf("s3store: stat %s: %w", key, notFound(err))
	}
	info, _ := fromObject(oi, oi.UserMetadata)
	info.Key = key
	return info, nil
}

// List lists the keys below prefix.
func (s *Store) List(ctx context.Context, prefix string, recursive bool) iter.Seq2[store.Info, error] {
	return func(yield func(store.Info, error) bool) {
		if err := store.CheckPrefix(prefix); err != nil {
			yield(store.Info{}, err)
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// S3 lists a page's objects before its common prefixes; a
		// directory listing is sorted here. Recursive listings come sorted.
		var page []store.Info
		if !recursive {
			defer func() {
				slices.SortFunc(page, func(a, b store.Info) int { return strings.Compare(a.Key, b.Key) })
				for _, info := range page {
					if !yield(info, nil) {
						return
					}
				}
			}()
		}
		for oi := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: recursive, WithMetadata: true}) {
			if oi.Err != nil {
				page = nil
				yield(store.Info{}, fmt.Errorf("s3store: list %s: %w", prefix, oi.Err))
				return
			}
			oi.Key = keyOf(oi.Key)
			if oi.Key == prefix || strings.HasPrefix(oi.Key, blobPrefix) {
				continue
			}
			var info store.Info
			if !recursive && strings.HasSuffix(oi.Key, "/") {
				// MinIO lists as a prefix the data a write cut by a
				// crash left without its metadata, where no object is:
				// a directory only when something is stored below it.
				held, err := s.holdsObjects(ctx, oi.Key)
				if err != nil {
					page = nil
					yield(store.Info{}, fmt.Errorf("s3store: list %s: %w", prefix, err))
					return
				}
				if !held {
					continue
				}
				info = store.Info{Key: oi.Key, Prefix: true}
			} else {
				info, _ = fromObject(oi, oi.UserMetadataStripped)
			}
			if !recursive {
				page = append(page, info)
				continue
			}
			if !yield(info, nil) {
				return
			}
		}
	}
}

// holdsObjects reports whether an object (a directory marker included)
// is stored below prefix.
func (s *Store) holdsObjects(ctx context.Context, prefix string) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for oi := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true, MaxKeys: 1}) {
		if oi.Err != nil {
			return false, oi.Err
		}
		return true, nil
	}
	return false, nil
}

// Delete deletes keys, 1000 per request, and the blobs of those keys.
func (s *Store) Delete(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = objectName(k)
	}
	if err := s.removeAll(ctx, names); err != nil {
		return err
	}
	// One listing of the blobs under the keys' common directory finds the
	// blobs of all of them.
	set := make(map[string]bool, len(keys))
	common := ""
	for i, k := range keys {
		set[k] = true
		if i == 0 {
			common = k
		} else {
			common = commonDir(common, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	dir := common
	if i := strings.LastIndexByte(dir, '/'); i >= 0 {
		dir = dir[:i+1]
	} else {
		dir = ""
	}
	var blobs []string
	for oi := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: blobPrefix + dir, Recursive: true}) {
		if oi.Err != nil {
			return fmt.Errorf("s3store: delete: list blobs: %w", oi.Err)
		}
		owner := path.Dir(strings.TrimPrefix(oi.Key, blobPrefix))
		if set[owner] {
			blobs = append(blobs, oi.Key)
		}
	}
	return s.removeAll(ctx, blobs)
}

func commonDir(a, b string) string {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return a[:i]
}

func (s *Store) removeAll(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	ch := make(chan minio.ObjectInfo)
	go func() {
		defer close(ch)
		for _, k := range keys {
			select {
			case ch <- minio.ObjectInfo{Key: k}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var first error
	for e := range s.c.RemoveObjects(ctx, s.bucket, ch, minio.RemoveObjectsOptions{}) {
		if e.Err != nil && first == nil && !errors.Is(notFound(e.Err), store.ErrNotFound) {
			first = fmt.Errorf("s3store: delete %s: %w", e.ObjectName, e.Err)
		}
	}
	if first == nil && ctx.Err() != nil {
		return fmt.Errorf("s3store: delete: %w", ctx.Err())
	}
	return first
}

func (s *Store) remove(ctx context.Context, key string) {
	_ = s.c.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
}

func blobKey(key, id string) string { return blobPrefix + key + "/" + id }

func check(o store.PutOptions, n int64, sum string) error {
	if o.Size >= 0 && o.Size != n {
		return fmt.Errorf("got %d bytes, want %d: %w", n, o.Size, store.ErrContentMismatch)
	}
	if o.SHA256 != "" && !strings.EqualFold(o.SHA256, sum) {
		return fmt.Errorf("SHA-256 %s, want %s: %w", sum, o.SHA256, store.ErrContentMismatch)
	}
	return nil
}

func userMeta(o store.PutOptions, blob string) map[string]string {
	m := map[string]string{
		metaMode:  strconv.FormatUint(uint64(o.Mode), 8),
		metaMtime: strconv.FormatInt(o.ModTime.UnixNano(), 10),
	}
	if o.SHA256 != "" {
		m[metaSHA256] = strings.ToLower(o.SHA256)
	}
	if o.LinkTarget != "" {
		// Header values must be printable ASCII; the target is any UTF-8.
		m[metaLink] = hex.EncodeToString([]byte(o.LinkTarget))
	}
	if blob != "" {
		m[metaBlob] = blob
		m[metaSize] = strconv.FormatInt(o.Size, 10)
	}
	return m
}

func infoOf(key string, o store.PutOptions) store.Info {
	return store.Info{Key: key, Size: o.Size, Mode: o.Mode, ModTime: time.Unix(0, o.ModTime.UnixNano()), SHA256: strings.ToLower(o.SHA256), LinkTarget: o.LinkTarget}
}

// fromObject reads an object's metadata; blob is the id of its blob, if
// the object is a pointer.
func fromObject(oi minio.ObjectInfo, meta map[string]string) (info store.Info, blob string) {
	get := func(name string) string {
		if v, ok := meta[name]; ok {
			return v
		}
		for k, v := range meta {
			if strings.EqualFold(k, name) || strings.EqualFold(k, "X-Amz-Meta-"+name) {
				return v
			}
		}
		return ""
	}
	info = store.Info{Key: oi.Key, Size: oi.Size, ModTime: oi.LastModified, SHA256: get(metaSHA256)}
	if m, err := strconv.ParseUint(get(metaMode), 8, 32); err == nil {
		info.Mode = uint32(m)
	}
	if ns, err := strconv.ParseInt(get(metaMtime), 10, 64); err == nil {
		info.ModTime = time.Unix(0, ns)
	}
	if l := get(metaLink); l != "" {
		if b, err := hex.DecodeString(l); err == nil {
			info.LinkTarget = string(b)
		}
	}
	if b := get(metaBlob); len(b) == blobIDLen {
		if n, err := strconv.ParseInt(get(metaSize), 10, 64); err == nil {
			info.Size, blob = n, b
		}
	}
	return info, blob
}

func notFound(err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && (resp.Code == "NoSuchKey" || resp.StatusCode == http.StatusNotFound) {
		return fmt.Errorf("%w (%s)", store.ErrNotFound, resp.Code)
	}
	return err
}

// exactReader counts bytes, keeps the first read error, and, when want is
// known, fails instead of returning the last byte if more follow: the
// request is then aborted and S3 never commits a cut object.
type exactReader struct {
	r    io.Reader
	want int64
	n    int64
	err  error
}

func (e *exactReader) Read(p []byte) (int, error) {
	short := func() error {
		e.err = fmt.Errorf("only %d of the %d bytes announced: %w", e.n, e.want, store.ErrContentMismatch)
		return e.err
	}
	if e.want < 0 {
		n, err := e.r.Read(p)
		e.n += int64(n)
		if err != nil && err != io.EOF {
			e.err = err
		}
		return n, err
	}
	left := e.want - e.n
	if left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) < left {
		n, err := e.r.Read(p)
		e.n += int64(n)
		switch {
		case err == io.EOF:
			return n, short()
		case err != nil:
			e.err = err
		}
		return n, err
	}
	// This read can end the content: take the rest, then make sure that
	// nothing follows before handing over the last bytes.
	n, err := io.ReadFull(e.r, p[:left])
	e.n += int64(n)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		return 0, short()
	case err != nil:
		e.err = err
		return 0, err
	}
	var one [1]byte
	if m, _ := io.ReadFull(e.r, one[:]); m > 0 {
		e.err = fmt.Errorf("more than the %d bytes announced: %w", e.want, store.ErrContentMismatch)
		return 0, e.err
	}
	return n, nil
}

func randomID() string {
	b := make([]byte, blobIDLen/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
