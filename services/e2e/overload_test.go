package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestOverload checks that load beyond what the cluster holds is refused at
// once, clearly and with Retry-After, never with a timeout or a crash: a
// sandbox beyond every executor's capacity is a 429, a completion beyond
// the router's concurrency a 503.
func TestOverload(t *testing.T) {
	d := startDev(t, "CONCH_MAX_SANDBOXES=3", "CONCH_MAX_CONCURRENT_COMPLETIONS=2", "CONCH_SANDBOX_POOL=0")

	var ids []string
	for range 3 {
		code, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
		var created struct{ ID string }
		if code != http.StatusOK || json.Unmarshal(body, &created) != nil {
			t.Fatalf("create = %d %s", code, body)
		}
		ids = append(ids, created.ID)
	}
	code, h, body := d.do("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	// The answer is the cluster's, whichever saw the executor full first
	// (the router's view of it, or the executor): it names no executor.
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(string(body), `"code":"at_capacity"`) || strings.Contains(string(body), "is full") {
		t.Fatalf("create beyond capacity = %d (Retry-After %q) %s, want 429 with Retry-After", code, h.Get("Retry-After"), body)
	}
	// A completion that needs a sandbox ends with the same answer rather
	// than handing the model the cluster's failure.
	chat := map[string]any{"model": "default", "messages": []map[string]string{{"role": "user", "content": "run: true"}}, "tools": []map[string]string{{"type": "shell"}}}
	code, h, body = d.do("POST", "/v1/chat/completions", d.Key, chat)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(string(body), `"type":"rate_limit_error"`) || !strings.Contains(string(body), `"code":"at_capacity"`) {
		t.Fatalf("completion beyond capacity = %d (Retry-After %q) %s", code, h.Get("Retry-After"), body)
	}
	for _, id := range ids {
		if code, body := d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil); code != http.StatusOK {
			t.Fatalf("delete = %d %s", code, body)
		}
	}

	// More completions at once than the router runs: each is answered at
	// once, 200 or 503 with Retry-After.
	slow := map[string]any{"model": "default", "messages": []map[string]string{{"role": "user", "content": "run: sleep 1"}}, "tools": []map[string]string{{"type": "shell"}}}
	b, _ := json.Marshal(slow)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[int]int{}
		bad   []string
	)
	for range 6 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(t.Context(), "POST", d.URL+"/v1/chat/completions", bytes.NewReader(b))
			req.Header.Set("Authorization", "Bearer "+d.Key)
			resp, err := http.DefaultClient.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				bad = append(bad, err.Error())
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			codes[resp.StatusCode]++
			switch {
			case resp.StatusCode == http.StatusOK && strings.Contains(string(body), "exited with code 0"):
			case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" && strings.Contains(string(body), `"code":"overloaded"`):
			default:
				bad = append(bad, resp.Status+" "+string(body))
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 || codes[http.StatusOK] < 2 || codes[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("6 completions at once with room for 2: %v; unexpected answers: %v", codes, bad)
	}
}
