package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsEcho is a WebSocket echo server of python's standard library alone,
// on port 8081 of a sandbox's loopback: short frames, unfragmented.
const wsEcho = `import socket, base64, hashlib, threading
def serve(c):
    f = c.makefile("rwb"); key = b""
    while True:
        l = f.readline()
        if l in (b"\r\n", b""): break
        if l.lower().startswith(b"sec-websocket-key:"): key = l.split(b":", 1)[1].strip()
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    f.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n"); f.flush()
    while True:
        h = f.read(2)
        if len(h) < 2: return
        op, n = h[0] & 15, h[1] & 127
        mask = f.read(4); data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(n)))
        if op == 8: return
        f.write(bytes([128 | op, len(data)]) + data); f.flush()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 8081)); s.listen(8)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
`

// serveStreamed runs cmd in sandbox id as a streamed command, up to the longest
// timeout, until the test ends: a server for its ports.
func serveStreamed(t testing.TB, d *dev, id, cmd string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b, _ := json.Marshal(map[string]any{"command": cmd, "timeout_seconds": 300, "stream": true})
	req, err := http.NewRequestWithContext(ctx, "POST", d.URL+"/api/v1/sandboxes/"+id+"/commands", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Key)
	req.Header.Set("Content-Type", "application/json")
	go func() {
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
}

// A port of a sandbox as a URL: HTTP and WebSocket through the router and
// the executor, private behind the key, public behind a signed URL, and
// nothing once closed.
func TestPorts(t *testing.T) {
	d := startDev(t)
	status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); status != 200 || err != nil {
		t.Fatalf("create = %d %s", status, body)
	}
	base := "/api/v1/sandboxes/" + sb.ID
	if status, body := d.call("POST", base+"/commands", d.Key, map[string]any{"command": "mkdir site && echo hello-from-the-sandbox > site/index.html && cat > ws.py <<'EOF'\n" + wsEcho + "EOF"}); status != 200 {
		t.Fatalf("setup = %d %s", status, body)
	}
	// The servers run as streamed commands for as long as the test.
	serveStreamed(t, d, sb.ID, "cd site && exec python3 -m http.server 8080 --bind 127.0.0.1")
	serveStreamed(t, d, sb.ID, "exec python3 ws.py")
	expose := func(body map[string]any) (int, map[string]any) {
		t.Helper()
		status, raw := d.call("POST", base+"/ports", d.Key, body)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return status, out
	}
	get := func(u, key string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		// A sandbox's page is an origin of its own, never conch's.
		if resp.StatusCode == 200 && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "sandbox allow-scripts") {
			t.Errorf("%s: served without the sandbox policy: %v", u, resp.Header)
		}
		return resp.StatusCode, string(b)
	}

	status, private := expose(map[string]any{"port": 8080})
	privURL, _ := private["url"].(string)
	if status != 200 || !strings.HasSuffix(privURL, base+"/ports/8080/proxy/") || private["public"] != false {
		t.Fatalf("expose 8080 = %d %v", status, private)
	}
	var got string
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, b := get(privURL+"index.html", d.Key); code == 200 {
			got = b
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sandbox's server never answered through the port")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != "hello-from-the-sandbox\n" {
		t.Fatalf("through the private URL: %q", got)
	}
	if code, _ := get(privURL+"index.html", ""); code != http.StatusUnauthorized {
		t.Errorf("the private URL without the key: %d", code)
	}

	status, public := expose(map[string]any{"port": 8080, "public": true, "expires_in_seconds": 600})
	pubURL, _ := public["url"].(string)
	if status != 200 || !strings.Contains(pubURL, "/ports/") || public["expires_at"] == nil {
		t.Fatalf("expose 8080 public = %d %v", status, public)
	}
	if code, b := get(pubURL+"index.html", ""); code != 200 || b != "hello-from-the-sandbox\n" {
		t.Errorf("through the public URL: %d %q", code, b)
	}
	if code, _ := get(pubURL[:len(pubURL)-3]+"xx/index.html", ""); code != http.StatusForbidden {
		t.Errorf("a changed public URL: %d, want 403", code)
	}

	// A WebSocket through a private port.
	if status, _ := expose(map[string]any{"port": 8081}); status != 200 {
		t.Fatalf("expose 8081 = %d", status)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(d.URL, "http") + base + "/ports/8081/proxy/"
	var c *websocket.Conn
	for {
		var err error
		c, _, err = websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Key}}})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("websocket through the port: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("ping-through-conch")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := c.Read(ctx); err != nil || string(b) != "ping-through-conch" {
		t.Fatalf("websocket echo: %q %v", b, err)
	}
	c.CloseNow()

	status, raw := d.call("GET", base+"/ports", d.Key, nil)
	if status != 200 || strings.Count(string(raw), `"port":`) != 2 {
		t.Errorf("list = %d %s", status, raw)
	}
	// The CLI: expose prints the URL, ports lists, unexpose closes.
	env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
	if out, errOut, code := runConch(t, env, "sandbox", "expose", "--public", sb.ID, "8082"); code != 0 || !strings.Contains(out, "/ports/") {
		t.Errorf("conch sandbox expose: %q %q %d", out, errOut, code)
	}
	if out, errOut, code := runConch(t, env, "sandbox", "ports", sb.ID); code != 0 || !strings.Contains(out, "8080\tpublic\t") || !strings.Contains(out, "8081\tprivate\t-\t") || !strings.Contains(out, "8082\tpublic") {
		t.Errorf("conch sandbox ports: %q %q %d", out, errOut, code)
	}
	if out, errOut, code := runConch(t, env, "sandbox", "unexpose", sb.ID, "8082"); code != 0 {
		t.Errorf("conch sandbox unexpose: %q %q %d", out, errOut, code)
	}
	for _, tc := range []struct {
		body map[string]any
		want int
	}{
		{map[string]any{"port": 0}, http.StatusBadRequest},
		{map[string]any{"port": 80, "expires_in_seconds": 86401}, http.StatusBadRequest},
		{map[string]any{"port": 80, "extra": 1}, http.StatusBadRequest},
	} {
		if status, out := expose(tc.body); status != tc.want {
			t.Errorf("expose %v = %d %v, want %d", tc.body, status, out, tc.want)
		}
	}
	// Closed: neither URL reaches it.
	if status, raw := d.call("DELETE", base+"/ports/8080", d.Key, nil); status != 200 {
		t.Fatalf("close = %d %s", status, raw)
	}
	if code, _ := get(privURL+"index.html", d.Key); code != http.StatusNotFound {
		t.Errorf("a closed port's private URL: %d, want 404", code)
	}
	if code, _ := get(pubURL+"index.html", ""); code != http.StatusNotFound {
		t.Errorf("a closed port's public URL: %d, want 404", code)
	}
	if status, _ := d.call("DELETE", base+"/ports/8080", d.Key, nil); status != http.StatusNotFound {
		t.Errorf("closing it again: %d, want 404", status)
	}
}
