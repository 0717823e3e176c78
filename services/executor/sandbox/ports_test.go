package sandbox

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// The host reaches what a sandbox listens on, on the sandbox's own
// loopback, and nothing of its own: each sandbox has a loopback of its
// own.
func TestDialPort(t *testing.T) {
	r := testRuntime(t)
	ctx := context.Background()
	sb, err := r.Create(ctx, Spec{ID: "dial-port"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	other, err := r.Create(ctx, Spec{ID: "dial-port-other"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy(ctx)
	// A one-line echo server on port 8123 of the sandbox's loopback.
	server := `import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 8123)); s.listen(4)
print("listening", flush=True)
while True:
    c, _ = s.accept(); f = c.makefile("rwb"); l = f.readline(); f.write(b"echo " + l); f.flush(); c.close()
`
	p, err := sb.Start(Options{Command: "exec python3 -c '" + server + "'", Budget: -1, OnOutput: func(Stream, []byte) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	var c io.ReadWriteCloser
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err = sb.DialPort(ctx, 8123)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "hi\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "echo hi\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	// Another sandbox's loopback has nothing there, nor does a closed
	// port of this one.
	if c, err := other.DialPort(ctx, 8123); err == nil || !strings.Contains(err.Error(), "refused") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("another sandbox's port 8123: %v", err)
	}
	if c, err := sb.DialPort(ctx, 8124); err == nil {
		c.Close()
		t.Fatal("a port nothing listens on was reached")
	}
	for _, port := range []int{0, -1, 65536} {
		if _, err := sb.DialPort(ctx, port); err == nil {
			t.Errorf("port %d dialled", port)
		}
	}
}
