package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/conch-sh/conch/services/internal/conchtest"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
)

// BenchmarkSnapshotRestore snapshots a sandbox holding 100 MB of files
// and starts a sandbox from that snapshot, then forks it, through conch dev's REST API
// on a local MinIO; its floor, interleaved with it in the same
// iterations, puts and gets the same number of bytes straight to and
// from the same MinIO, one request each. A snapshot's path: tar in the
// sandbox, the agent, the executor, gRPC to the workspace service, which
// stages the archive in MinIO; a restore's the way back, plus a new
// sandbox.
func BenchmarkSnapshotRestore(b *testing.B) {
	m := miniotest.Start(b)
	d := startDev(b, "CONCH_S3_ENDPOINT="+m.Endpoint, "CONCH_S3_ACCESS_KEY="+m.AccessKey, "CONCH_S3_SECRET_KEY="+m.SecretKey, "CONCH_S3_BUCKET="+miniotest.Bucket(), "CONCH_LOG_LEVEL=warn")
	post := func(path string, body any, out any) {
		b.Helper()
		status, resp := d.call("POST", path, d.Key, body)
		if status != 200 {
			b.Fatalf("POST %s = %d %s", path, status, resp)
		}
		if out != nil {
			if err := json.Unmarshal(resp, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	del := func(path string) {
		if status, resp := d.call("DELETE", path, d.Key, nil); status != 200 {
			b.Fatalf("DELETE %s = %d %s", path, status, resp)
		}
	}
	var src struct{ ID string }
	post("/api/v1/sandboxes", map[string]any{}, &src)
	// Ten files of 10 MB of random bytes: nothing a compressor or a
	// sparse file could shorten.
	post("/api/v1/sandboxes/"+src.ID+"/commands", map[string]any{"command": "for i in 0 1 2 3 4 5 6 7 8 9; do head -c 10000000 /dev/urandom > f$i; done", "timeout_seconds": 120}, nil)

	mc, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		b.Fatal(err)
	}
	bucket := miniotest.Bucket() + "-floor"
	if err := mc.MakeBucket(b.Context(), bucket, minio.MakeBucketOptions{}); err != nil {
		b.Fatal(err)
	}

	var conch, snap, restore, floor, fork, cp []time.Duration
	var size int64
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		var s struct {
			ID        string `json:"id"`
			SizeBytes int64  `json:"size_bytes"`
		}
		post("/api/v1/sandboxes/"+src.ID+":snapshot", map[string]any{}, &s)
		taken := time.Now()
		var restored struct{ ID string }
		post("/api/v1/sandboxes", map[string]any{"snapshot": s.ID}, &restored)
		end := time.Now()
		conch, snap, restore = append(conch, end.Sub(start)), append(snap, taken.Sub(start)), append(restore, end.Sub(taken))
		size = s.SizeBytes

		// A fork streams the same archive into a copy's tar; its floor
		// is cp of the same files in a sandbox, timed inside it.
		start = time.Now()
		var forked struct{ Sandboxes []struct{ ID string } }
		post("/api/v1/sandboxes/"+src.ID+":fork", map[string]any{"count": 1}, &forked)
		fork = append(fork, time.Since(start))
		var out struct{ Stdout string }
		post("/api/v1/sandboxes/"+restored.ID+"/commands", map[string]any{"command": "s=$(date +%s%N); cp -a /home/workspace /tmp/copy; e=$(date +%s%N); rm -rf /tmp/copy; echo $((e-s))", "timeout_seconds": 120}, &out)
		ns, err := strconv.ParseInt(strings.TrimSpace(out.Stdout), 10, 64)
		if err != nil {
			b.Fatalf("cp timing %q: %v", out.Stdout, err)
		}
		cp = append(cp, time.Duration(ns))

		b.StopTimer()
		del("/api/v1/sandboxes/" + forked.Sandboxes[0].ID)
		del("/api/v1/sandboxes/" + restored.ID)
		del("/api/v1/snapshots/" + s.ID)
		data := make([]byte, size)
		b.StartTimer()

		start = time.Now()
		if _, err := mc.PutObject(b.Context(), bucket, "archive", bytes.NewReader(data), size, minio.PutObjectOptions{DisableMultipart: true}); err != nil {
			b.Fatal(err)
		}
		obj, err := mc.GetObject(b.Context(), bucket, "archive", minio.GetObjectOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, obj); err != nil || n != size {
			b.Fatalf("get: %d bytes, %v", n, err)
		}
		obj.Close()
		floor = append(floor, time.Since(start))
	}
	b.StopTimer()
	if size < 100_000_000 {
		b.Fatalf("the archive holds %d bytes, want the 100 MB written", size)
	}
	p50 := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(conch), "snapshot-restore-p50-ms")
	b.ReportMetric(p50(snap), "snapshot-p50-ms")
	b.ReportMetric(p50(restore), "restore-p50-ms")
	b.ReportMetric(p50(floor), "minio-put-get-p50-ms")
	b.ReportMetric(float64(size)/1e6, "archive-MB")
	b.ReportMetric(p50(fork), "fork-p50-ms")
	b.ReportMetric(p50(cp), "cp-p50-ms")
	b.Logf("snapshot+restore %.0f ms (snapshot %.0f, restore %.0f), MinIO put+get of the same %s %.0f ms; fork %.0f ms, cp %.0f ms",
		p50(conch), p50(snap), p50(restore), fmt.Sprintf("%.1f MB", float64(size)/1e6), p50(floor), p50(fork), p50(cp))
}

// BenchmarkForkCopyOnWrite forks a sandbox holding 100 MB of files on
// btrfs storage (--sandbox-storage), through conch dev's REST API; its
// floor, in the same iterations, is cp --reflink=never -a of the same
// files inside the source sandbox, timed inside it. The first fork after
// the files are written also writes them out to the filesystem (a
// snapshot needs its source's data on disk), so it is reported on its
// own; the p50 is that of forks of settled files, as a sandbox's are
// seconds after it wrote them.
func BenchmarkForkCopyOnWrite(b *testing.B) {
	storage := filepath.Join(conchtest.Btrfs(b, 4<<30), "storage")
	d := startDev(b, "CONCH_SANDBOX_STORAGE="+storage, "CONCH_LOG_LEVEL=warn")
	post := func(path string, body any, out any) {
		b.Helper()
		status, resp := d.call("POST", path, d.Key, body)
		if status != 200 {
			b.Fatalf("POST %s = %d %s", path, status, resp)
		}
		if out != nil {
			if err := json.Unmarshal(resp, out); err != nil {
				b.Fatal(err)
			}
		}
	}
	var src struct{ ID string }
	post("/api/v1/sandboxes", map[string]any{}, &src)
	post("/api/v1/sandboxes/"+src.ID+"/commands", map[string]any{"command": "for i in 0 1 2 3 4 5 6 7 8 9; do head -c 10000000 /dev/urandom > f$i; done", "timeout_seconds": 120}, nil)
	fork := func() (time.Duration, string) {
		start := time.Now()
		var forked struct{ Sandboxes []struct{ ID string } }
		post("/api/v1/sandboxes/"+src.ID+":fork", map[string]any{"count": 1}, &forked)
		return time.Since(start), forked.Sandboxes[0].ID
	}
	first, id := fork()
	var out struct{ Stdout string }
	post("/api/v1/sandboxes/"+id+"/commands", map[string]any{"command": "cat f* | wc -c"}, &out)
	if strings.TrimSpace(out.Stdout) != "100000000" {
		b.Fatalf("the copy holds %q bytes, want the 100 MB written", out.Stdout)
	}
	d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil)

	var forks, cps []time.Duration
	b.ResetTimer()
	for range b.N {
		took, id := fork()
		forks = append(forks, took)
		post("/api/v1/sandboxes/"+src.ID+"/commands", map[string]any{"command": "s=$(date +%s%N); cp --reflink=never -a /home/workspace /tmp/copy; e=$(date +%s%N); rm -rf /tmp/copy; echo $((e-s))", "timeout_seconds": 120}, &out)
		ns, err := strconv.ParseInt(strings.TrimSpace(out.Stdout), 10, 64)
		if err != nil {
			b.Fatalf("cp timing %q: %v", out.Stdout, err)
		}
		cps = append(cps, time.Duration(ns))
		b.StopTimer()
		d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil)
		b.StartTimer()
	}
	b.StopTimer()
	p50 := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(forks), "fork-p50-ms")
	b.ReportMetric(p50(cps), "cp-p50-ms")
	b.ReportMetric(float64(first.Microseconds())/1000, "first-fork-ms")
	b.Logf("fork on btrfs %.1f ms (the first, writing the files out, %.0f ms), cp %.1f ms", p50(forks), float64(first.Microseconds())/1000, p50(cps))
}
