package s3store_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
	"github.com/conch-sh/conch/services/internal/store/s3store"
	"github.com/conch-sh/conch/services/internal/store/storetest"
)

func TestContract(t *testing.T) {
	m := miniotest.Start(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := s3store.New(t.Context(), s3store.Options{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: miniotest.Bucket()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestBlobsAreCollected checks in the raw bucket that the blobs of large
// objects go when they are replaced or deleted.
func TestBlobsAreCollected(t *testing.T) {
	m := miniotest.Start(t)
	bucket := miniotest.Bucket()
	s, err := s3store.New(t.Context(), s3store.Options{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	blobs := func() []string {
		var keys []string
		for oi := range raw.ListObjectsIter(t.Context(), bucket, minio.ListObjectsOptions{Prefix: ".blobs/", Recursive: true}) {
			if oi.Err != nil {
				t.Fatal(oi.Err)
			}
			keys = append(keys, oi.Key)
		}
		return keys
	}
	large := bytes.Repeat([]byte("b"), 5<<20)
	for i := range 3 {
		if _, err := s.Put(t.Context(), "d/big", bytes.NewReader(large), store.PutOptions{Size: -1}); err != nil {
			t.Fatal(err)
		}
		if got := blobs(); len(got) != 1 || !strings.HasPrefix(got[0], ".blobs/d/big/") {
			t.Fatalf("after put %d: blobs %v, want one", i, got)
		}
	}
	if _, err := s.Put(t.Context(), "d/big", strings.NewReader("small"), store.PutOptions{Size: -1}); err != nil {
		t.Fatal(err)
	}
	if got := blobs(); len(got) != 0 {
		t.Fatalf("after a small put: blobs %v", got)
	}
	for _, k := range []string{"d/a", "d/e/b", "d/e/c"} {
		if _, err := s.Put(t.Context(), k, bytes.NewReader(large), store.PutOptions{Size: int64(len(large))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(t.Context(), []string{"d/e/b", "d/e/c", "d/a"}); err != nil {
		t.Fatal(err)
	}
	if got := blobs(); len(got) != 0 {
		t.Fatalf("after delete: blobs %v", got)
	}
}

// BenchmarkLargeObject measures the upload of a large object of known and
// unknown size: one blob upload and a pointer.
func BenchmarkLargeObject(b *testing.B) {
	m := miniotest.Start(b)
	s, err := s3store.New(b.Context(), s3store.Options{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: miniotest.Bucket()})
	if err != nil {
		b.Fatal(err)
	}
	const size = 100_000_000
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	for _, known := range []bool{true, false} {
		b.Run(fmt.Sprintf("known-size-%v", known), func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				n := int64(-1)
				if known {
					n = size
				}
				if _, err := s.Put(b.Context(), "big", bytes.NewReader(data), store.PutOptions{Size: n}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCollectAbortsIncompleteUploads checks in the raw bucket that Collect
// aborts a multipart upload of a blob that a crash left half done: its
// parts take space, yet no object listing shows them.
func TestCollectAbortsIncompleteUploads(t *testing.T) {
	m := miniotest.Start(t)
	bucket := miniotest.Bucket()
	s, err := s3store.New(t.Context(), s3store.Options{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := minio.NewCore(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	blob := ".blobs/up/f/" + strings.Repeat("0", 32)
	id, err := raw.NewMultipartUpload(t.Context(), bucket, blob, minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Stage marks a multipart upload while it runs with an object named
	// after the blob; the crash left it.
	if _, err := raw.PutObject(t.Context(), bucket, blob+".upload", bytes.NewReader(nil), 0, "", "", minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	part := bytes.Repeat([]byte("p"), 5<<20)
	if _, err := raw.PutObjectPart(t.Context(), bucket, blob, id, 1, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{}); err != nil {
		t.Fatal(err)
	}
	incomplete := func() []string {
		var keys []string
		// MinIO lists incomplete uploads by object name only.
		for u := range raw.ListIncompleteUploads(t.Context(), bucket, blob, true) {
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			keys = append(keys, u.Key)
		}
		return keys
	}
	if n, err := s.Collect(t.Context(), time.Hour); err != nil || n != 0 {
		t.Fatalf("Collect(1h) = %d, %v; want a young upload kept", n, err)
	}
	if got := incomplete(); len(got) != 1 {
		t.Fatalf("incomplete uploads before collect = %v, want the one begun", got)
	}
	if n, err := s.Collect(t.Context(), 0); err != nil || n != 1 {
		t.Fatalf("Collect = %d, %v; want the incomplete upload aborted", n, err)
	}
	if got := incomplete(); len(got) != 0 {
		t.Fatalf("incomplete uploads after collect = %v", got)
	}
}

// TestListSkipsWhatACrashLeft: a MinIO killed while it wrote an object
// leaves the object's data on its drive without the metadata (xl.meta)
// that makes it an object. MinIO lists such a leftover as a common
// prefix, though nothing is stored below it: a directory listing must not
// show it (here it would read as an empty directory named like the file
// that failed), while real directories, empty or not, stay.
func TestListSkipsWhatACrashLeft(t *testing.T) {
	dir := t.TempDir()
	m, stop, err := miniotest.Launch(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	bucket := miniotest.Bucket()
	s, err := s3store.New(t.Context(), s3store.Options{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("d", 250) // a marker stored under another name
	for _, key := range []string{"ws/file", "ws/dir/inner", "ws/empty/", "ws/" + long + "/"} {
		if _, err := s.Put(t.Context(), key, strings.NewReader(""), store.PutOptions{Size: 0}); err != nil {
			t.Fatal(err)
		}
	}
	// What a kill between MinIO's writing an object's data and its
	// metadata leaves on a single drive.
	leftover := filepath.Join(dir, bucket, "ws", "failed.bin", "9c1f0a3e-3b5e-4c55-9d2e-0c8f0d5f3a11")
	if err := os.MkdirAll(leftover, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(leftover, "part.1"), []byte("half of it"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for info, err := range s.List(t.Context(), "ws/", false) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, info.Key)
	}
	want := []string{"ws/" + long + "/", "ws/dir/", "ws/empty/", "ws/file"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("listing %q, want %q", got, want)
	}
}
