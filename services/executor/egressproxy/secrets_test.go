package egressproxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/conchtest/testnet"
	"github.com/conch-sh/conch/services/internal/egress"
)

// TestSecretsTravelOnlyOnVerifiedTLS sends a secret's placeholder every
// way a sandbox can reach the proxy, and checks that the value reaches
// the test internet only in a request read over TLS from the host the
// secret is bound to, the proxy having verified that host's certificate;
// every other request is answered with a refusal or a failure that says
// why, and its connection recorded so.
func TestSecretsTravelOnlyOnVerifiedTLS(t *testing.T) {
	in := testnet.Start(t)
	// other.example reaches the internet too, whose certificate does not
	// name it.
	res := &testnet.Resolver{Internet: in, Names: map[string][]netip.Addr{"other.example": {in.Addr}}}
	allow, err := egress.NewAllowlist([]string{"api.conch.test", "other.conch.test", "other.example"})
	if err != nil {
		t.Fatal(err)
	}
	bound, err := egress.NewAllowlist([]string{"api.conch.test", "other.example"})
	if err != nil {
		t.Fatal(err)
	}
	const cleartext = "conch: the secret for api.conch.test is only sent over https"
	cases := []struct {
		name string
		// untrusted leaves the proxy with the system's roots, which do
		// not verify the internet.
		untrusted bool
		// send sends a request with the placeholder p through the proxy
		// at sock, trusting ca for intercepted TLS.
		send func(t *testing.T, sock, p string, ca *x509.CertPool) (int, string)
		// want is the status and a part of the body the sandbox gets;
		// delivered says the secret reaches the internet, over TLS.
		code      int
		want      string
		delivered bool
		// decision and reason of the connection's record.
		decision, reason string
	}{
		{name: "plain http to the bound domain", send: absolute("http://api.conch.test/headers", "Authorization"),
			code: http.StatusForbidden, want: cleartext + "\n", decision: "refused", reason: cleartext},
		{name: "plain http to port 443", send: absolute("http://api.conch.test:443/headers", "Authorization"),
			code: http.StatusForbidden, want: cleartext + "\n", decision: "refused", reason: cleartext},
		{name: "plain http, the name spelled otherwise", send: absolute("http://API.Conch.Test./headers", "Authorization"),
			code: http.StatusForbidden, want: cleartext + "\n", decision: "refused", reason: cleartext},
		{name: "plain http, in a header it is not bound to", send: absolute("http://api.conch.test/headers", "X-Token"),
			code: http.StatusForbidden, want: "(header X-Token) that is not bound to this host", decision: "refused"},
		{name: "plain http to a host it is not bound to", send: absolute("http://other.conch.test/headers", "Authorization"),
			code: http.StatusForbidden, want: "not bound to this host", decision: "refused"},
		{name: "https to a host it is not bound to", send: absolute("https://other.conch.test/headers", "Authorization"),
			code: http.StatusForbidden, want: "not bound to this host", decision: "refused"},
		{name: "a tunnel to a host it is not bound to carries the placeholder as it is", send: tunnelled("other.conch.test:443", in.Roots),
			code: http.StatusOK, want: "Authorization: Bearer conch-secret-", decision: "allowed"},
		{name: "https in absolute form", send: absolute("https://api.conch.test/headers", "Authorization"),
			code: http.StatusOK, want: "Authorization: Bearer ", delivered: true, decision: "allowed"},
		{name: "https through an intercepted tunnel", send: intercepted("api.conch.test:443"),
			code: http.StatusOK, want: "Authorization: Bearer ", delivered: true, decision: "allowed"},
		{name: "an intercepted tunnel to a port without TLS", send: intercepted("api.conch.test:80"),
			code: http.StatusBadGateway, want: "conch: TLS to api.conch.test:80 is not verified", decision: "failed"},
		{name: "https to a port without TLS", send: absolute("https://api.conch.test:8080/headers", "Authorization"),
			code: http.StatusBadGateway, want: "conch: TLS to api.conch.test:8080 is not verified", decision: "failed"},
		{name: "a bound name the upstream's certificate does not name", send: absolute("https://other.example/headers", "Authorization"),
			code: http.StatusBadGateway, want: "conch: TLS to other.example:443 is not verified", decision: "failed"},
		{name: "an upstream the roots do not verify", untrusted: true, send: absolute("https://api.conch.test/headers", "Authorization"),
			code: http.StatusBadGateway, want: "conch: TLS to api.conch.test:443 is not verified", decision: "failed"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			secret := fmt.Sprintf("s3cr3t-%d-of-the-proxy-test", i)
			ca, err := NewCA()
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Resolver: res, UpstreamRoots: in.Roots}
			if c.untrusted {
				cfg.UpstreamRoots = nil
			}
			recs := make(chan Record, 16)
			p := NewPlaceholder()
			sock := serveWith(t, cfg, Policy{Gateway: "g", Allow: allow, Ports: []int{80, 443, 8080}, CA: ca,
				Secrets:      []Secret{{Placeholder: p, Value: secret, Allow: bound, Header: "Authorization"}},
				OnConnection: func(r Record) { recs <- r }})
			trust := x509.NewCertPool()
			trust.AppendCertsFromPEM(ca.PEM)
			code, body := c.send(t, sock, p, trust)
			if code != c.code || !strings.Contains(body, c.want) {
				t.Fatalf("got %d %q, want %d with %q", code, body, c.code, c.want)
			}
			if c.delivered && !strings.Contains(body, secret) {
				t.Fatalf("the upstream did not get the secret: %q", body)
			}
			for _, r := range in.Requests() {
				if strings.Contains(r.Head, secret) && (!c.delivered || !r.TLS) {
					t.Fatalf("the internet read the secret (TLS %v):\n%s", r.TLS, r.Head)
				}
			}
			// The record is made as the connection ends, which may be
			// after the answer.
			select {
			case r := <-recs:
				if r.Decision != c.decision || (c.reason != "" && r.Reason != c.reason) {
					t.Fatalf("record %+v, want %s (%q)", r, c.decision, c.reason)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no record of the connection")
			}
		})
	}
}

// absolute sends an absolute-form GET of url with the placeholder in
// header.
func absolute(url, header string) func(t *testing.T, sock, p string, _ *x509.CertPool) (int, string) {
	return func(t *testing.T, sock, p string, _ *x509.CertPool) (int, string) {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n%s: Bearer %s\r\nConnection: close\r\n\r\n", url, header, p)
		return readResponse(t, bufio.NewReader(c))
	}
}

// intercepted opens a tunnel to target, whose TLS the proxy terminates,
// and sends a GET with the placeholder in Authorization inside it.
func intercepted(target string) func(t *testing.T, sock, p string, ca *x509.CertPool) (int, string) {
	return func(t *testing.T, sock, p string, ca *x509.CertPool) (int, string) {
		t.Helper()
		c, br, code, body := connect(t, sock, target)
		if code != http.StatusOK {
			return code, body
		}
		host, _, _ := net.SplitHostPort(target)
		tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: host, RootCAs: ca})
		defer tc.Close()
		fmt.Fprintf(tc, "GET /headers HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", host, p)
		return readResponse(t, bufio.NewReader(tc))
	}
}

// tunnelled opens a tunnel to target, whose TLS the proxy does not
// terminate, and sends a GET with the placeholder in Authorization inside
// it, trusting roots.
func tunnelled(target string, roots *x509.CertPool) func(t *testing.T, sock, p string, _ *x509.CertPool) (int, string) {
	return func(t *testing.T, sock, p string, _ *x509.CertPool) (int, string) {
		t.Helper()
		return intercepted(target)(t, sock, p, roots)
	}
}

func readResponse(t *testing.T, br *bufio.Reader) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
