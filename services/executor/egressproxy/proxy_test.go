package egressproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/conchtest/testnet"
	"github.com/conch-sh/conch/services/internal/egress"
)

// serve runs a proxy for pol on a unix socket and returns its path.
func serve(t *testing.T, pol Policy) string {
	t.Helper()
	return serveWith(t, Config{}, pol)
}

// serveWith is serve with a proxy of cfg.
func serveWith(t *testing.T, cfg Config, pol Policy) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = New(cfg).Serve(t.Context(), l, pol)
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
	return sock
}

// connect asks for a tunnel to target and returns the connection and
// the proxy's answer.
func connect(t *testing.T, sock, target string) (net.Conn, *bufio.Reader, int, string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	if resp.StatusCode != http.StatusOK {
		body, _ = io.ReadAll(resp.Body)
	}
	return c, br, resp.StatusCode, string(body)
}

// TestLimits checks that a sandbox holds at most MaxConns connections to
// the outside and moves at most MaxBytes, each refused with a 429 that
// says which limit of which gateway.
func TestLimits(t *testing.T) {
	in := testnet.Start(t)
	allow, err := egress.NewAllowlist([]string{in.Addr.String()})
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(in.Addr.String(), "80")

	t.Run("connections", func(t *testing.T) {
		sock := serve(t, Policy{Gateway: "small", Allow: allow, MaxConns: 1})
		first, _, code, _ := connect(t, sock, target)
		if code != http.StatusOK {
			t.Fatalf("first: %d", code)
		}
		if _, _, code, body := connect(t, sock, target); code != http.StatusTooManyRequests || !strings.Contains(body, "1 connections open, the most gateway small allows") {
			t.Fatalf("second: %d %q", code, body)
		}
		first.Close()
		// The first one's slot is freed once the proxy sees it closed.
		for i := 0; ; i++ {
			_, _, code, body := connect(t, sock, target)
			if code == http.StatusOK {
				break
			}
			if i > 1000 || code != http.StatusTooManyRequests {
				t.Fatalf("after closing the first: %d %q", code, body)
			}
		}
	})

	t.Run("bytes", func(t *testing.T) {
		sock := serve(t, Policy{Gateway: "small", Allow: allow, MaxBytes: 64 << 10})
		c, br, code, _ := connect(t, sock, target)
		if code != http.StatusOK {
			t.Fatalf("connect: %d", code)
		}
		fmt.Fprintf(c, "GET /bytes/%d HTTP/1.1\r\nHost: x\r\n\r\n", 1<<20)
		n, _ := io.Copy(io.Discard, br)
		if n >= 1<<20 || n > 64<<10 {
			t.Fatalf("received %d bytes with a budget of %d", n, 64<<10)
		}
		if _, _, code, body := connect(t, sock, target); code != http.StatusTooManyRequests || !strings.Contains(body, "the most gateway small allows") {
			t.Fatalf("after the budget: %d %q", code, body)
		}
	})

	t.Run("client connections", func(t *testing.T) {
		sock := serve(t, Policy{Gateway: "small", Allow: allow, MaxConns: 1})
		// Clients that never finish their request hold no upstream, but
		// are bounded too: the proxy closes those beyond the bound.
		var held []net.Conn
		for range clientsPerConn {
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			t.Cleanup(func() { c.Close() })
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("a client beyond the bound: read %v, want EOF", err)
		}
		_ = held
	})
}

// TestHostHeaderFollowsTheURL checks that an absolute-form request reaches
// its server with the Host it was judged by, whatever Host header the
// client sent.
func TestHostHeaderFollowsTheURL(t *testing.T) {
	in := testnet.Start(t)
	allow, err := egress.NewAllowlist([]string{in.Addr.String()})
	if err != nil {
		t.Fatal(err)
	}
	sock := serve(t, Policy{Gateway: "g", Allow: allow})
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://%s/x HTTP/1.1\r\nHost: internal.example\r\n\r\n", in.Addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if want := testnet.Greeting + " " + in.Addr.String() + "/x"; !strings.Contains(string(body), want) {
		t.Fatalf("body %q, want %q", body, want)
	}
}

// TestSOCKSRefusal checks that a SOCKS5 client is told "not allowed by
// ruleset" for a host off the list and for a refused address, at once.
func TestSOCKSRefusal(t *testing.T) {
	t.Parallel()
	allow, err := egress.NewAllowlist([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	sock := serve(t, Policy{Gateway: "g", Allow: allow})
	for _, target := range [][]byte{
		append([]byte{atypDomain, 11}, "example.org"...),
		{atypIPv4, 127, 0, 0, 1},
		{atypIPv4, 169, 254, 169, 254},
	} {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		req := append([]byte{socksVersion, 1, socksNoAuth, socksVersion, socksConnect, 0}, target...)
		if _, err := c.Write(append(req, 0, 80)); err != nil {
			t.Fatal(err)
		}
		reply := make([]byte, 12)
		n, _ := io.ReadAtLeast(c, reply, 4)
		c.Close()
		if n < 4 || reply[0] != socksVersion || reply[1] != socksNoAuth || reply[3] != repNotAllowed {
			t.Errorf("target %v: reply % x", target, reply[:n])
		}
	}
}

// TestRecordsAreBounded checks that what a sandbox writes in a request
// reaches its connection's record cut to the bounds of a report, however
// long it is.
func TestRecordsAreBounded(t *testing.T) {
	t.Parallel()
	allow, err := egress.NewAllowlist([]string{"allowed.conch.test"})
	if err != nil {
		t.Fatal(err)
	}
	recs := make(chan Record, 4)
	sock := serve(t, Policy{Gateway: "g", Allow: allow, OnConnection: func(r Record) { recs <- r }})
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 100<<10) + ".example"
	cases := []struct{ name, request string }{
		{"absolute form", "GET http://" + long + "/ HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"CONNECT", "CONNECT " + long + ":443 HTTP/1.1\r\nHost: x\r\n\r\n"},
	}
	for _, c := range cases {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, c.request); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: %v %v", c.name, resp, err)
		}
		r := <-recs
		if len(r.Host) > egress.MaxHostReported || len(r.Reason) > egress.MaxReasonReported || !strings.HasPrefix(r.Host, "aaaa") || r.Decision != "refused" {
			t.Errorf("%s: record of %d bytes of host, %d of reason, %s", c.name, len(r.Host), len(r.Reason), r.Decision)
		}
	}
}
