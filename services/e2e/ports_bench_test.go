package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkPortProxy times a GET of a small file from python's
// http.server in a sandbox, through an exposed port's private URL (the
// router, gRPC to the executor, the sandbox's loopback), against the same
// server program serving the same file on the host's loopback, alternated
// in the same iterations, each on a kept-alive connection.
func BenchmarkPortProxy(b *testing.B) {
	d := startDev(b, "CONCH_LOG_LEVEL=warn")
	status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); status != 200 || err != nil {
		b.Fatalf("create = %d %s", status, body)
	}
	base := "/api/v1/sandboxes/" + sb.ID
	d.call("POST", base+"/commands", d.Key, map[string]any{"command": "mkdir site && echo hello > site/index.html"})
	serveStreamed(b, d, sb.ID, "cd site && exec python3 -m http.server 8080 --bind 127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	status, body = d.call("POST", base+"/ports", d.Key, map[string]any{"port": 8080})
	var port struct{ URL string }
	if err := json.Unmarshal(body, &port); status != 200 || err != nil {
		b.Fatalf("expose = %d %s", status, body)
	}

	// The floor: the same server on the host's loopback.
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte("hello\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	floorPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	floor := exec.CommandContext(ctx, "python3", "-m", "http.server", strconv.Itoa(floorPort), "--bind", "127.0.0.1")
	floor.Dir = dir
	if err := floor.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = floor.Process.Kill(); _ = floor.Wait() }()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	get := func(u, key string) bool {
		req, _ := http.NewRequest("GET", u, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(body) == "hello\n"
	}
	deadline := time.Now().Add(20 * time.Second)
	for !get(port.URL+"index.html", d.Key) || !get("http://127.0.0.1:"+strconv.Itoa(floorPort)+"/index.html", "") {
		if time.Now().After(deadline) {
			b.Fatal("the servers never answered")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var proxied, direct []time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if !get(port.URL+"index.html", d.Key) {
			b.Fatal("through the port: failed")
		}
		proxied = append(proxied, time.Since(start))
		start = time.Now()
		if !get("http://127.0.0.1:"+strconv.Itoa(floorPort)+"/index.html", "") {
			b.Fatal("direct: failed")
		}
		direct = append(direct, time.Since(start))
	}
	b.StopTimer()
	p50 := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(proxied), "proxied-p50-ms")
	b.ReportMetric(p50(direct), "direct-p50-ms")
	b.Logf("GET through an exposed port %.2f ms, straight to the same server on the host's loopback %.2f ms", p50(proxied), p50(direct))
}
