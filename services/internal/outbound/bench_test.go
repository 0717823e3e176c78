package outbound

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
)

// BenchmarkJudge is the guard's verdict on one address: what every
// connection an upstream, tool or forwarding call opens pays.
func BenchmarkJudge(b *testing.B) {
	g := Must(Options{Allow: []string{"10.8.0.0/16", "models.internal"}, ControlPlane: []string{"127.0.0.1:2379"}})
	ap := netip.MustParseAddrPort("93.184.215.14:443")
	for b.Loop() {
		if g.Judge("", ap) != "" {
			b.Fatal("refused")
		}
	}
}

// BenchmarkDial is a guarded connection against a plain one to the same
// allowed server, in the same run: the guard's whole cost per connection
// (judging, and the socket's second check).
func BenchmarkDial(b *testing.B) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	g := Must(Options{Allow: []string{addr}})
	for _, bc := range []struct {
		name string
		dial func(context.Context, string, string) (net.Conn, error)
	}{
		{"plain", (&net.Dialer{}).DialContext},
		{"guarded", g.DialContext},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				c, err := bc.dial(b.Context(), "tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}
