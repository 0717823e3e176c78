package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/conch-sh/conch/services/workspace/miniotest"
)

// BenchmarkFilesTransfer uploads and downloads a 100 MB file through the
// REST API of conch dev backed by a local MinIO, and reports the growth of
// conch dev's peak RSS over its resident size before the transfers. Its
// anchors, minio-put and minio-get, then move the same bytes straight to
// and from the same MinIO in one request each; minio-put-parts sends them
// as parallel multipart parts, which on two cores is no faster.
//
// Where an upload's time goes (perf record -a on two cores): MinIO's own
// work, its bitrot hashing and the buffered write to disk, is most of it,
// and the upload cannot be faster than minio-put. conch streams the body
// once, in 256 KiB messages, into one PUT of known size; its own share is
// the SHA-256 that becomes the file's etag, the streaming signature's
// SHA-256 that lets MinIO check every chunk on an unencrypted link, and
// copying the messages through gRPC.
func BenchmarkFilesTransfer(b *testing.B) {
	m := miniotest.Start(b)
	d := startDev(b, "CONCH_S3_ENDPOINT="+m.Endpoint, "CONCH_S3_ACCESS_KEY="+m.AccessKey, "CONCH_S3_SECRET_KEY="+m.SecretKey, "CONCH_S3_BUCKET="+miniotest.Bucket(), "CONCH_LOG_LEVEL=warn")
	const size = 100_000_000
	data := bytes.Repeat([]byte("conch-bench-0123456789abcdef\n"), size/29+1)[:size]
	pid := d.cmd.Process.Pid
	c := &fileClient{t: b, d: d, key: d.Key, user: "bench"}
	// Warm up connections and code paths with a small file.
	if code, body := c.upload("/warm", strings.NewReader("warm"), -1); code != http.StatusOK {
		b.Fatalf("warm-up upload = %d %s", code, body)
	}
	base := procStatus(b, pid, "VmRSS")

	b.Run("upload", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if code, body := c.upload("/big.bin", bytes.NewReader(data), size); code != http.StatusOK {
				b.Fatalf("upload = %d %s", code, body)
			}
		}
		b.ReportMetric(float64(procStatus(b, pid, "VmHWM")-base)/(1<<20), "rss-growth-MiB")
	})
	b.Run("download", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			req, err := http.NewRequestWithContext(b.Context(), "GET", d.URL+"/api/v1/shell/io/download?path="+url.QueryEscape("/big.bin"), nil)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+d.Key)
			req.Header.Set("X-Shell-User-Id", "bench")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != size || resp.StatusCode != http.StatusOK {
				b.Fatalf("download = %d, %d bytes, %v", resp.StatusCode, n, err)
			}
		}
		b.ReportMetric(float64(procStatus(b, pid, "VmHWM")-base)/(1<<20), "rss-growth-MiB")
	})

	mc, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		b.Fatal(err)
	}
	bucket := miniotest.Bucket()
	if err := mc.MakeBucket(b.Context(), bucket, minio.MakeBucketOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Run("minio-put", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			// One streamed request, as the upload's is.
			if _, err := mc.PutObject(b.Context(), bucket, "big.bin", bytes.NewReader(data), size, minio.PutObjectOptions{DisableMultipart: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same bytes from a stream (no io.ReaderAt, as an upload body
	// is) in parallel multipart parts of 8 MiB, two at a time.
	b.Run("minio-put-parts", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if _, err := mc.PutObject(b.Context(), bucket, "big.bin", io.MultiReader(bytes.NewReader(data)), size, minio.PutObjectOptions{PartSize: 8 << 20, NumThreads: 2, ConcurrentStreamParts: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("minio-get", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			obj, err := mc.GetObject(b.Context(), bucket, "big.bin", minio.GetObjectOptions{})
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, obj)
			obj.Close()
			if err != nil || n != size {
				b.Fatalf("get = %d bytes, %v", n, err)
			}
		}
	})
}

// procStatus returns a size field of /proc/<pid>/status in bytes.
func procStatus(b *testing.B, pid int, field string) int64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == field {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
