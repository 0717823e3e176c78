package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// BenchmarkTerminalEcho times a keystroke's echo through conch dev's
// terminal WebSocket: a byte sent, the terminal's echo of it read back
// (the pty's own echo, at the shell's prompt), p50 and p99.
func BenchmarkTerminalEcho(b *testing.B) {
	d := startDev(b, "CONCH_LOG_LEVEL=warn")
	status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); status != 200 || err != nil {
		b.Fatalf("create = %d %s", status, body)
	}
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(d.URL, "http")+"/api/v1/sandboxes/"+sb.ID+"/terminal",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Key}}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	// The prompt first.
	if _, _, err := c.Read(ctx); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := c.Write(ctx, websocket.MessageBinary, []byte("x")); err != nil {
			b.Fatal(err)
		}
		for {
			_, m, err := c.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if strings.Contains(string(m), "x") {
				break
			}
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, "p99-ms")
}
