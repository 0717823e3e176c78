package outbound

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// names is a resolver for test names; any other name does not resolve, so
// that nothing leaves for real DNS.
type names map[string][]netip.Addr

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// serveOn starts an HTTP server on addr (host:0) answering with h.
func serveOn(t *testing.T, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// TestGuardRefusesEveryInternalSpelling points a client of the guard at a
// canary on loopback in every spelling of its address, directly and
// through a redirect from an allowed server: the canary is never reached,
// and the error names the address class.
func TestGuardRefusesEveryInternalSpelling(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	canary := serveOn(t, "127.0.0.1:0", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	port := canary.Listener.Addr().(*net.TCPAddr).Port
	p := ":" + itoa(port)
	// The operator allows one loopback address, where the redirector and
	// the allowed server listen; the control plane listens there too.
	allowed := serveOn(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		_, _ = w.Write([]byte("allowed"))
	}))
	control := serveOn(t, "127.0.0.2:0", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	g, err := New(Options{
		Allow:        []string{"127.0.0.2", "models.internal"},
		ControlPlane: []string{control.Listener.Addr().String(), "etcd.internal:2379"},
		Resolver: names{
			"localhost":        addrs("127.0.0.1", "::1"),
			"loop.example":     addrs("127.0.0.1"),
			"mixed.example":    addrs("10.0.0.9", "127.0.0.1"),
			"metadata.example": addrs("169.254.169.254"),
			"models.internal":  addrs("127.0.0.2"),
			"etcd.internal":    addrs("127.0.0.2"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := g.Client(0)

	cases := []struct {
		url  string
		want string // in the error
	}{
		{"http://127.0.0.1" + p + "/", "refused: loopback"},
		{"http://127.9.9.9" + p + "/", "refused: loopback"},
		{"http://[::1]" + p + "/", "refused: loopback"},
		{"http://[::ffff:127.0.0.1]" + p + "/", "refused: loopback"},
		{"http://[::ffff:7f00:1]" + p + "/", "refused: loopback"},
		{"http://[64:ff9b::7f00:1]" + p + "/", "loopback (embedded"},
		{"http://[2002:7f00:1::]" + p + "/", "loopback (embedded"},
		{"http://2130706433" + p + "/", "an address not written as one"},
		{"http://0177.0.0.1" + p + "/", "an address not written as one"},
		{"http://0x7f.0.0.1" + p + "/", "an address not written as one"},
		{"http://127.1" + p + "/", "an address not written as one"},
		{"http://localhost" + p + "/", "refused: loopback"},
		{"http://loop.example" + p + "/", "refused: loopback"},
		{"http://mixed.example" + p + "/", "refused: private"},
		{"http://metadata.example/", "refused: link-local"},
		{"http://169.254.169.254/latest/meta-data/", "refused: link-local"},
		{"http://10.1.2.3/", "refused: private"},
		{"http://192.168.0.1/", "refused: private"},
		{"http://[fd00:ec2::254]/", "refused: private"},
		{"http://100.64.0.1/", "refused: carrier-grade NAT"},
		{"http://0.0.0.0" + p + "/", "refused: unspecified"},
		{"http://224.0.0.1/", "refused: multicast"},
		{"http://" + control.Listener.Addr().String() + "/", "refused: conch's control plane"},
		{"http://etcd.internal:2379/", "refused: conch's control plane"},
	}
	for _, tc := range cases {
		for _, via := range []string{"direct", "redirect"} {
			u := tc.url
			if via == "redirect" {
				u = allowed.URL + "/?to=" + url.QueryEscape(tc.url)
			}
			resp, err := c.Get(u)
			if err == nil {
				resp.Body.Close()
				t.Errorf("%s %s: reached (status %d)", via, tc.url, resp.StatusCode)
				continue
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %s: error %q, want one saying %q", via, tc.url, err, tc.want)
			}
			var re *RefusedError
			if !errors.As(err, &re) && !strings.Contains(tc.want, "not written") {
				t.Errorf("%s %s: error %T is not a RefusedError", via, tc.url, err)
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the canary or the control plane was reached %d times", n)
	}
	// What the operator allows is reached, by address and by name.
	for _, u := range []string{allowed.URL + "/", "http://models.internal:" + itoa(allowed.Listener.Addr().(*net.TCPAddr).Port) + "/"} {
		resp, err := c.Get(u)
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		resp.Body.Close()
	}
}

// TestGuardIgnoresEnvironmentProxies: a proxy would make the connection
// the guard judged, so none is used.
func TestGuardIgnoresEnvironmentProxies(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.2:1")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.2:1")
	g := Must(Options{})
	if g.Transport().Proxy != nil {
		t.Fatal("the guard's transport uses a proxy")
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	g := Must(Options{Allow: []string{"10.8.0.0/16", "127.0.0.1:11434"}})
	cases := []struct {
		url  string
		kind URLKind
		want string // "" for accepted
	}{
		{"https://api.openai.com/v1", Base, ""},
		{"http://models.internal:8000/v1", Base, ""},
		{"http://10.8.1.2/v1", Base, ""},
		{"http://127.0.0.1:11434/v1", Base, ""},
		{"https://hooks.example.com/x?token=1", Endpoint, ""},
		{"https://api.openai.com/v1?x=", Base, "may not have a query"},
		{"https://api.openai.com/v1?", Base, "may not have a query"},
		{"https://api.openai.com/v1#x", Base, "fragment"},
		{"https://hooks.example.com/x#y", Endpoint, "fragment"},
		{"https://u:p@api.openai.com/v1", Base, "credentials"},
		{"ftp://api.openai.com/v1", Base, "http:// or https://"},
		{"file:///etc/passwd", Endpoint, "http:// or https://"},
		{"/v1", Base, "http:// or https://"},
		{"http:api.openai.com", Base, "with a host"},
		{"http://127.0.0.1:2379/v3/kv/range", Endpoint, "refused: loopback"},
		{"http://127.0.0.1:11435/v1", Base, "refused: loopback"},
		{"http://[::ffff:169.254.169.254]/", Endpoint, "refused: link-local"},
		{"http://10.9.0.1/v1", Base, "refused: private"},
		{"http://2130706433:2379/", Endpoint, "not written as one"},
		{"http://0x7f000001/", Endpoint, "not written as one"},
		{"http://api.openai.com:0/v1", Base, "bad port"},
		{"http://api.openai.com:99999/v1", Base, "bad port"},
	}
	for _, tc := range cases {
		_, err := g.ParseURL(tc.url, tc.kind)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ParseURL(%q) = %v, want accepted", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ParseURL(%q) = %v, want an error saying %q", tc.url, err, tc.want)
		}
	}
}

func TestJoinPath(t *testing.T) {
	t.Parallel()
	cases := []struct{ base, elem, want string }{
		{"https://api.openai.com/v1", "chat/completions", "https://api.openai.com/v1/chat/completions"},
		{"https://api.openai.com/v1/", "chat/completions", "https://api.openai.com/v1/chat/completions"},
		{"http://h:8000", "v1/messages", "http://h:8000/v1/messages"},
		{"http://h/a%3Fb", "c", "http://h/a%3Fb/c"},
	}
	for _, tc := range cases {
		got, err := JoinPath(tc.base, tc.elem)
		if err != nil || got != tc.want {
			t.Errorf("JoinPath(%q, %q) = %q, %v; want %q", tc.base, tc.elem, got, err, tc.want)
		}
	}
	for _, base := range []string{"http://127.0.0.1:2379/v3/kv/put?x=", "http://h/v1#", "http://h/v1?"} {
		if got, err := JoinPath(base, "chat/completions"); err == nil {
			t.Errorf("JoinPath(%q) = %q, want an error", base, got)
		}
	}
}

func TestRules(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"http://x", "10.0.0.0/33", "host:0", "host:http", "2130706433", "*"} {
		if err := ValidateRules("outbound allow", []string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := ValidateRules("outbound allow", []string{"10.0.0.0/8", "fd00::/8", "127.0.0.1:11434", "[::1]:8000", "models.internal", "*.corp.example", "models.internal:443"}); err != nil {
		t.Error(err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
