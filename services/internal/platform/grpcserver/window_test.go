package grpcserver

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/conch-sh/conch/services/internal/platform/chunks"
)

// TestFixedWindows holds a server to chunks' flow-control windows, read
// off the wire: it advertises chunks.Window per stream and opens its
// connection to chunks.ConnWindow, and a small call draws no PING, which
// gRPC's bandwidth-delay estimate would send, with a WINDOW_UPDATE, on
// almost every message it receives.
func TestFixedWindows(t *testing.T) {
	s := New(Options{Name: "window"})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(func() { s.GRPC().Stop() })

	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// Three health checks, one after the other, each a HEADERS and a DATA
	// frame holding an empty request.
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Check"}, {":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	call := func(id uint32) {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, []byte{0, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
	}
	next := uint32(1)
	call(next)
	window, connWindow, pings := uint32(0), uint32(65535), 0
	for done := 0; done < 3; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				window = v
			}
			if err := fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				connWindow += f.Increment
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				pings++
				if err := fr.WritePing(true, f.Data); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				if done++; done < 3 {
					next += 2
					call(next)
				}
			}
		}
	}
	if window != chunks.Window || connWindow != chunks.ConnWindow {
		t.Errorf("windows: stream %d, connection %d; want %d and %d", window, connWindow, chunks.Window, chunks.ConnWindow)
	}
	if pings != 0 {
		t.Errorf("the server sent %d PING frames for 3 small calls, want none", pings)
	}
}
