// Package s3store is the S3 implementation of store.Store, for MinIO.
//
// Metadata lives in the objects' user metadata so that one listing (MinIO's
// list-with-metadata extension) returns a whole workspace's manifest.
// Content whose SHA-256 is not known in advance is buffered in memory up to
// a limit, and larger content is staged under a temporary key and then
// copied with its final metadata, so an object is never visible without it.
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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/conch-sh/conch/services/workspace/store"
)

// Metadata names (x-amz-meta-*).
const (
	metaMode   = "Conch-Mode"
	metaMtime  = "Conch-Mtime"
	metaSHA256 = "Conch-Sha256"
	metaLink   = "Conch-Link"
)

// stagingPrefix holds content being uploaded whose hash is not yet known.
const stagingPrefix = ".staging/"

const (
	// bufferLimit is the largest content of unknown hash kept in memory
	// for a direct put.
	bufferLimit = 4 << 20
	// partSize is the multipart part size, which bounds the memory of a
	// streamed upload.
	partSize = 8 << 20
	// maxCopySize is S3's largest single server-side copy.
	maxCopySize = 5 << 30
)

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

// Put stores r under key. See the package comment for how the hash is kept.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, o store.PutOptions) (store.Info, error) {
	if err := store.CheckKey(key); err != nil {
		return store.Info{}, err
	}
	if o.LinkTarget != "" || strings.HasSuffix(key, "/") {
		var extra []byte
		if r != nil {
			b, err := io.ReadAll(io.LimitReader(r, 1))
			if err != nil {
				return store.Info{}, fmt.Errorf("s3store: put %s: read: %w", key, err)
			}
			extra = b
		}
		return s.putSmall(ctx, key, extra, o)
	}
	if o.Unhashed {
		cr := &countingReader{r: r}
		if _, err := s.c.PutObject(ctx, s.bucket, key, cr, -1, minio.PutObjectOptions{
			PartSize: partSize, ContentType: "application/octet-stream", UserMetadata: userMeta(o),
		}); err != nil {
			if cr.err != nil {
				err = cr.err
			}
			return store.Info{}, fmt.Errorf("s3store: put %s: %w", key, err)
		}
		if err := check(o, cr.n, ""); err != nil {
			s.remove(context.WithoutCancel(ctx), key)
			return store.Info{}, fmt.Errorf("s3store: put %s: %w", key, err)
		}
		o.Size = cr.n
		return infoOf(key, o), nil
	}
	// Read up to the buffer limit; small content goes in one direct put.
	buf := &bytes.Buffer{}
	n, err := io.Copy(buf, io.LimitReader(r, bufferLimit+1))
	if err != nil {
		return store.Info{}, fmt.Errorf("s3store: put %s: read: %w", key, err)
	}
	if n <= bufferLimit {
		return s.putSmall(ctx, key, buf.Bytes(), o)
	}
	// Large: stage, then copy with the metadata once the hash is known.
	staged := stagingPrefix + randomID()
	h := sha256.New()
	cr := &countingReader{r: io.TeeReader(io.MultiReader(buf, r), h)}
	if _, err := s.c.PutObject(ctx, s.bucket, staged, cr, -1, minio.PutObjectOptions{
		PartSize: partSize, ContentType: "application/octet-stream",
	}); err != nil {
		if cr.err != nil {
			err = cr.err
		}
		return store.Info{}, fmt.Errorf("s3store: put %s: stage: %w", key, err)
	}
	defer s.remove(context.WithoutCancel(ctx), staged)
	sum := hex.EncodeToString(h.Sum(nil))
	if err := check(o, cr.n, sum); err != nil {
		return store.Info{}, fmt.Errorf("s3store: put %s: %w", key, err)
	}
	o.SHA256, o.Size = sum, cr.n
	return s.copy(ctx, key, staged, cr.n, o)
}

func (s *Store) putSmall(ctx context.Context, key string, data []byte, o store.PutOptions) (store.Info, error) {
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	if o.LinkTarget != "" || strings.HasSuffix(key, "/") {
		if len(data) != 0 || o.Size > 0 {
			return store.Info{}, fmt.Errorf("s3store: put %s: links and directories have no content: %w", key, store.ErrContentMismatch)
		}
		hexSum = ""
	} else if err := check(o, int64(len(data)), hexSum); err != nil {
		return store.Info{}, fmt.Errorf("s3store: put %s: %w", key, err)
	}
	o.SHA256, o.Size = hexSum, int64(len(data))
	_, err := s.c.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{
		UserMetadata: userMeta(o), ContentType: "application/octet-stream", DisableMultipart: true,
	})
	if err != nil {
		return store.Info{}, fmt.Errorf("s3store: put %s: %w", key, err)
	}
	return infoOf(key, o), nil
}

// Copy copies src to dst with the metadata of o (its size and hash must
// match src, which the caller read or wrote).
func (s *Store) Copy(ctx context.Context, dst, src string, o store.PutOptions) (store.Info, error) {
	if err := store.CheckKey(dst); err != nil {
		return store.Info{}, err
	}
	if err := store.CheckKey(src); err != nil {
		return store.Info{}, err
	}
	si, err := s.Stat(ctx, src)
	if err != nil {
		return store.Info{}, err
	}
	if o.SHA256 == "" {
		o.SHA256 = si.SHA256
	}
	if o.SHA256 != si.SHA256 && si.SHA256 != "" || o.Size >= 0 && o.Size != si.Size {
		return store.Info{}, fmt.Errorf("s3store: copy %s: %w", src, store.ErrContentMismatch)
	}
	o.Size = si.Size
	return s.copy(ctx, dst, src, si.Size, o)
}

func (s *Store) copy(ctx context.Context, dst, src string, size int64, o store.PutOptions) (store.Info, error) {
	dest := minio.CopyDestOptions{Bucket: s.bucket, Object: dst, UserMetadata: userMeta(o), ReplaceMetadata: true}
	source := minio.CopySrcOptions{Bucket: s.bucket, Object: src}
	var err error
	if size > maxCopySize {
		_, err = s.c.ComposeObject(ctx, dest, source)
	} else {
		_, err = s.c.CopyObject(ctx, dest, source)
	}
	if err != nil {
		return store.Info{}, fmt.Errorf("s3store: copy %s to %s: %w", src, dst, notFound(err))
	}
	return infoOf(dst, o), nil
}

// Get opens key's content.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, store.Info, error) {
	if err := store.CheckKey(key); err != nil {
		return nil, store.Info{}, err
	}
	obj, err := s.c.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, store.Info{}, fmt.Errorf("s3store: get %s: %w", key, notFound(err))
	}
	oi, err := obj.Stat()
	if err != nil {
		_ = obj.Close()
		return nil, store.Info{}, fmt.Errorf("s3store: get %s: %w", key, notFound(err))
	}
	return obj, fromObject(oi, oi.UserMetadata), nil
}

// Stat returns key's metadata.
func (s *Store) Stat(ctx context.Context, key string) (store.Info, error) {
	if err := store.CheckKey(key); err != nil {
		return store.Info{}, err
	}
	oi, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return store.Info{}, fmt.Errorf("s3store: stat %s: %w", key, notFound(err))
	}
	return fromObject(oi, oi.UserMetadata), nil
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
			if oi.Key == prefix || (prefix == "" && strings.HasPrefix(oi.Key, stagingPrefix)) {
				continue
			}
			var info store.Info
			if !recursive && strings.HasSuffix(oi.Key, "/") {
				info = store.Info{Key: oi.Key, Prefix: true}
			} else {
				info = fromObject(oi, oi.UserMetadataStripped)
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

// Delete deletes keys, 1000 per request.
func (s *Store) Delete(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := store.CheckKey(k); err != nil {
			return err
		}
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

// SweepStaging deletes staged content older than age, left by a process
// that died mid-upload.
func (s *Store) SweepStaging(ctx context.Context, age time.Duration) error {
	var old []string
	for oi := range s.c.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{Prefix: stagingPrefix, Recursive: true}) {
		if oi.Err != nil {
			return fmt.Errorf("s3store: sweep: %w", oi.Err)
		}
		if time.Since(oi.LastModified) > age {
			old = append(old, oi.Key)
		}
	}
	if len(old) == 0 {
		return nil
	}
	return s.Delete(ctx, old)
}

func check(o store.PutOptions, n int64, sum string) error {
	if o.Size >= 0 && o.Size != n {
		return fmt.Errorf("got %d bytes, want %d: %w", n, o.Size, store.ErrContentMismatch)
	}
	if o.SHA256 != "" && !strings.EqualFold(o.SHA256, sum) {
		return fmt.Errorf("SHA-256 %s, want %s: %w", sum, o.SHA256, store.ErrContentMismatch)
	}
	return nil
}

func userMeta(o store.PutOptions) map[string]string {
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
	return m
}

func infoOf(key string, o store.PutOptions) store.Info {
	return store.Info{Key: key, Size: o.Size, Mode: o.Mode, ModTime: time.Unix(0, o.ModTime.UnixNano()), SHA256: strings.ToLower(o.SHA256), LinkTarget: o.LinkTarget}
}

func fromObject(oi minio.ObjectInfo, meta map[string]string) store.Info {
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
	info := store.Info{Key: oi.Key, Size: oi.Size, ModTime: oi.LastModified, SHA256: get(metaSHA256)}
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
	return info
}

func notFound(err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && (resp.Code == "NoSuchKey" || resp.StatusCode == http.StatusNotFound) {
		return fmt.Errorf("%w (%s)", store.ErrNotFound, resp.Code)
	}
	return err
}

type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
