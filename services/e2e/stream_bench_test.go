package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkStreamFirstByte times a streamed command's first output
// through conch dev's REST API ("stream": true), from the request to its
// first stdout event, against its floor in the same iterations: the same
// command started from Go with a pipe, to its first byte (bare-p50-ms),
// plus one round trip to the same server (GET /healthz, rtt-p50-ms).
// floor-p50-ms is their sum; each command is left as soon as its first
// byte came (the stream's end kills it).
func BenchmarkStreamFirstByte(b *testing.B) {
	d := startDev(b, "CONCH_LOG_LEVEL=warn")
	status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); status != 200 || err != nil {
		b.Fatalf("create = %d %s", status, body)
	}
	const command = "echo first; sleep 1"
	req := `{"command": "` + command + `", "stream": true}`
	// A first command warms the sandbox's spare shells as a session's
	// commands find them.
	streamFirst(b, d, sb.ID, req)
	var conch, bare, rtt []time.Duration
	for b.Loop() {
		b.StopTimer()
		bare = append(bare, bareFirstByte(b, command))
		rtt = append(rtt, roundTrip(b, d))
		time.Sleep(commandPause)
		b.StartTimer()
		conch = append(conch, streamFirst(b, d, sb.ID, req))
	}
	ms := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(ms(conch), "p50-ms")
	b.ReportMetric(ms(bare), "bare-p50-ms")
	b.ReportMetric(ms(rtt), "rtt-p50-ms")
	b.ReportMetric(ms(bare)+ms(rtt), "floor-p50-ms")
}

// commandPause stands for the time between two commands of a session.
const commandPause = 5 * time.Millisecond

// streamFirst times a streamed command to its first stdout event.
func streamFirst(b *testing.B, d *dev, id, body string) time.Duration {
	b.Helper()
	req, err := http.NewRequestWithContext(b.Context(), "POST", d.URL+"/api/v1/sandboxes/"+id+"/commands", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Key)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "event: stdout" {
			return time.Since(start)
		}
	}
	b.Fatalf("no stdout event: %v", sc.Err())
	return 0
}

// bareFirstByte times command started from Go to the first byte of its
// stdout, then kills it.
func bareFirstByte(b *testing.B, command string) time.Duration {
	b.Helper()
	cmd := exec.Command("/bin/sh", "-c", command)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	if _, err := out.Read(make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return d
}

// roundTrip times one GET /healthz to d.
func roundTrip(b *testing.B, d *dev) time.Duration {
	b.Helper()
	start := time.Now()
	resp, err := http.Get(d.URL + "/healthz")
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start)
}
