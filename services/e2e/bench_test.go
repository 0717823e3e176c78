package e2e

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"
)

// BenchmarkCompletionOverhead measures what the router adds to a completion
// without tools: the same request sent straight to a local fake upstream and
// through conch dev (auth, gateway lookup, loop, response), in the same run.
// It reports both medians and their difference.
func BenchmarkCompletionOverhead(b *testing.B) {
	d := startDev(b)
	answer := openAIText("ok")
	up := newFakeUpstream(b, func(int, map[string]any) (int, string) { return 200, answer })
	createGateway(b, d, map[string]any{"name": "bench", "upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"}})
	body := []byte(`{"model":"bench","messages":[{"role":"user","content":"hi"}]}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	call := func(url, key string) time.Duration {
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	// Warm connections and caches.
	for range 50 {
		call(up.URL+"/chat/completions", "")
		call(d.URL+"/v1/chat/completions", d.Key)
	}
	b.ResetTimer()
	direct := make([]time.Duration, 0, b.N)
	via := make([]time.Duration, 0, b.N)
	for range b.N {
		direct = append(direct, call(up.URL+"/chat/completions", ""))
		via = append(via, call(d.URL+"/v1/chat/completions", d.Key))
	}
	b.StopTimer()
	dm, vm := median(direct), median(via)
	b.ReportMetric(float64(dm.Microseconds())/1000, "direct-p50-ms")
	b.ReportMetric(float64(vm.Microseconds())/1000, "conch-p50-ms")
	b.ReportMetric(float64((vm-dm).Microseconds())/1000, "overhead-p50-ms")
}

// BenchmarkCompletionThroughput measures completions per second through
// conch dev against a local fake upstream, with parallel clients.
func BenchmarkCompletionThroughput(b *testing.B) {
	d := startDev(b)
	answer := openAIText("ok")
	up := newFakeUpstream(b, func(int, map[string]any) (int, string) { return 200, answer })
	createGateway(b, d, map[string]any{"name": "bench", "upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"}})
	body := []byte(`{"model":"bench","messages":[{"role":"user","content":"hi"}]}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.SetParallelism(8)
	start := time.Now()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", d.URL+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+d.Key)
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "completions/s")
}
