package egressproxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/conchtest/testnet"
	"github.com/conch-sh/conch/services/internal/egress"
)

// benchProxy serves a proxy allowing only the test internet's address on
// a unix socket, as the executor serves a sandbox's, and returns its path.
func benchProxy(b *testing.B, in *testnet.Internet) string {
	b.Helper()
	allow, err := egress.NewAllowlist([]string{in.Addr.String()})
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(b.TempDir(), "proxy.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	p := New(Config{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Serve(b.Context(), l, Policy{Gateway: "bench", Allow: allow})
	}()
	b.Cleanup(func() { _ = l.Close(); <-done })
	return sock
}

// tunnelTo opens a CONNECT tunnel to target through the proxy at sock.
func tunnelTo(b *testing.B, sock, target string) (net.Conn, *bufio.Reader) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("CONNECT: %v %v", resp, err)
	}
	return c, br
}

// get sends a GET on c and reads the whole response.
func get(b *testing.B, c net.Conn, br *bufio.Reader, path string) int64 {
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: bench\r\n\r\n", path)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return n
}

func p50(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Microseconds()) / 1000
}

// BenchmarkConnectSetup measures what the proxy adds to a connection: a
// new TCP connection and one small request to a server in a network
// namespace over a veth pair, directly (the floor) and through a CONNECT
// tunnel of the proxy, interleaved so that both see the same machine.
func BenchmarkConnectSetup(b *testing.B) {
	in := testnet.Start(b)
	sock := benchProxy(b, in)
	target := net.JoinHostPort(in.Addr.String(), "80")
	var direct, proxied []time.Duration
	for b.Loop() {
		start := time.Now()
		c, err := net.Dial("tcp", target)
		if err != nil {
			b.Fatal(err)
		}
		get(b, c, bufio.NewReader(c), "/")
		direct = append(direct, time.Since(start))
		c.Close()

		start = time.Now()
		c, br := tunnelTo(b, sock, target)
		get(b, c, br, "/")
		proxied = append(proxied, time.Since(start))
		c.Close()
	}
	d, p := p50(direct), p50(proxied)
	b.ReportMetric(d, "direct-p50-ms")
	b.ReportMetric(p, "proxied-p50-ms")
	b.ReportMetric(p-d, "added-p50-ms")
}

// BenchmarkTunnelThroughput downloads 64 MiB per op from the namespace's
// server, directly (the floor) and through a CONNECT tunnel.
func BenchmarkTunnelThroughput(b *testing.B) {
	in := testnet.Start(b)
	sock := benchProxy(b, in)
	target := net.JoinHostPort(in.Addr.String(), "80")
	const size = 64 << 20
	path := fmt.Sprintf("/bytes/%d", size)
	var directT, proxiedT time.Duration
	dc, err := net.Dial("tcp", target)
	if err != nil {
		b.Fatal(err)
	}
	defer dc.Close()
	dbr := bufio.NewReaderSize(dc, 256<<10)
	pc, pbr := tunnelTo(b, sock, target)
	defer pc.Close()
	for b.Loop() {
		start := time.Now()
		get(b, dc, dbr, path)
		directT += time.Since(start)
		start = time.Now()
		get(b, pc, pbr, path)
		proxiedT += time.Since(start)
	}
	mb := float64(size) * float64(b.N) / 1e6
	b.ReportMetric(mb/directT.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/proxiedT.Seconds(), "tunnel-MB/s")
}
