package discovery

import (
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/conch-sh/conch/services/internal/platform/chunks"
)

// TestDialFixedWindows holds every connection to chunks' flow-control
// windows, read off the wire: the client's SETTINGS advertise
// chunks.Window per stream, which also turns gRPC's bandwidth-delay
// estimate off, and its first WINDOW_UPDATE opens the connection to
// chunks.ConnWindow.
func TestDialFixedWindows(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	conn, err := DialAddr(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Connect()
	c, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Fatalf("preface %q: %v", preface, err)
	}
	fr := http2.NewFramer(c, c)
	// Both come at once, before the client waits for the server's
	// SETTINGS, which never come: a client that sends no WINDOW_UPDATE
	// gives up on the connection.
	window, connWindow := uint32(0), uint32(65535)
	for connWindow == 65535 {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				window = v
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				connWindow += f.Increment
			}
		}
	}
	if window != chunks.Window || connWindow != chunks.ConnWindow {
		t.Errorf("windows: stream %d, connection %d; want %d and %d", window, connWindow, chunks.Window, chunks.ConnWindow)
	}
}
