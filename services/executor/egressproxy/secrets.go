package egressproxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/conch-sh/conch/services/internal/egress"
	"github.com/conch-sh/conch/services/internal/platform/pki"
)

// Secret is a value the sandbox uses without holding it: its programs see
// Placeholder, which the proxy replaces with Value in the headers of
// requests to the hosts of Allow (in Header alone, when set), and only on
// a connection whose TLS it verified for that host (sendSecrets).
type Secret struct {
	Placeholder string
	Value       string
	Allow       *egress.Allowlist
	Header      string
}

// NewPlaceholder returns a placeholder no program would send by chance.
func NewPlaceholder() string {
	return "conch-secret-" + strings.ToLower(rand.Text())
}

// CA signs the certificates the proxy shows a sandbox for the hosts whose
// TLS it terminates, so that it can put secrets in their requests. Each
// sandbox has its own; nothing else trusts it.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate, for the sandbox's trust bundle.
	PEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewCA makes a CA valid for a day more than a sandbox may live.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          pki.Serial(),
		Subject:               pkix.Name{CommonName: "conch sandbox egress CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egressproxy: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaves: map[string]*tls.Certificate{}}, nil
}

// leaf returns the certificate the proxy shows for host.
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: pki.Serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ca.leaves[host] = c
	return c, nil
}

// secretsFor are the secrets bound to host.
func (s *session) secretsFor(host string) []Secret {
	var out []Secret
	for _, sec := range s.pol.Secrets {
		if sec.Allow.Match(host) {
			out = append(out, sec)
		}
	}
	return out
}

// carriesSecrets judges the placeholders in h of a request to host:port:
// it reports whether there is any, each of a secret bound to host (and in
// its header, when the secret has one); a placeholder of any other secret
// refuses the request.
func carriesSecrets(pol *Policy, host string, port int, h http.Header) (bool, error) {
	carries := false
	for name, values := range h {
		for _, v := range values {
			for _, sec := range pol.Secrets {
				if !strings.Contains(v, sec.Placeholder) {
					continue
				}
				if !sec.Allow.Match(host) || (sec.Header != "" && !strings.EqualFold(sec.Header, name)) {
					return false, &Refused{Host: host, Port: port, Gateway: pol.Gateway, Why: "the request carries a secret's placeholder (header " + name + ") that is not bound to this host"}
				}
				carries = true
			}
		}
	}
	return carries, nil
}

// Cleartext is a request that carries a secret's placeholder and would
// not travel over TLS to the secret's domain: refused, as the value must
// never cross the network where anyone on the way can read it.
type Cleartext struct{ Domain string }

func (e *Cleartext) Error() string {
	return "conch: the secret for " + e.Domain + " is only sent over https"
}

// Unverified is a connection to a secret's domain whose TLS the proxy
// could not verify: the secret is not sent on it.
type Unverified struct {
	Target string
	Err    error
}

func (e *Unverified) Error() string {
	return "conch: TLS to " + e.Target + " is not verified, so its secret is not sent: " + e.Err.Error()
}

func (e *Unverified) Unwrap() error { return e.Err }

// canonical is host as policies match it: an IP literal in its plain
// form, a name in lookup form; host itself when it is neither.
func canonical(host string) string {
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return ip.Unmap().String()
	}
	if n, err := egress.NormalizeName(host); err == nil {
		return n
	}
	return host
}

// verifiedTLS is a TLS connection to name whose certificate the proxy
// verified for name against its upstream roots. It is the only thing a
// secret's value is written to, and only for secrets bound to name.
type verifiedTLS struct {
	conn    *tls.Conn
	counted *countedConn
	name    string
	taken   atomic.Bool
}

// tlsHandshakeTimeout bounds the handshake with a secret's host.
const tlsHandshakeTimeout = 10 * time.Second

// dialVerified connects to host:port, which the policy allowed, and
// verifies its TLS for host. A connection that fails verification is
// closed, and recorded failed with the reason.
func (s *session) dialVerified(ctx context.Context, host string, port int) (*verifiedTLS, error) {
	name := canonical(host)
	up, done, err := s.connect(ctx, "https", host, port)
	if err != nil {
		return nil, err
	}
	cc := s.counted(up, done)
	tc := tls.Client(cc, &tls.Config{ServerName: name, RootCAs: s.p.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		err = &Unverified{Target: net.JoinHostPort(name, strconv.Itoa(port)), Err: err}
		cc.fail(err)
		_ = tc.Close()
		return nil, err
	}
	return &verifiedTLS{conn: tc, counted: cc, name: name}, nil
}

// placeSecrets puts in h the values of the secrets whose placeholders it
// holds, judged again against the name the connection was verified for,
// and its certificate checked to name it once more: the value goes where
// the judgment looked, or nowhere.
func (v *verifiedTLS) placeSecrets(pol *Policy, port int, h http.Header) error {
	cs := v.conn.ConnectionState()
	if !cs.HandshakeComplete || len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return &Unverified{Target: net.JoinHostPort(v.name, strconv.Itoa(port)), Err: errors.New("no verified certificate")}
	}
	if err := cs.PeerCertificates[0].VerifyHostname(v.name); err != nil {
		return &Unverified{Target: net.JoinHostPort(v.name, strconv.Itoa(port)), Err: err}
	}
	if _, err := carriesSecrets(pol, v.name, port, h); err != nil {
		return err
	}
	for _, values := range h {
		for i, val := range values {
			for _, sec := range pol.Secrets {
				if sec.Allow.Match(v.name) {
					val = strings.ReplaceAll(val, sec.Placeholder, sec.Value)
				}
			}
			values[i] = val
		}
	}
	return nil
}

// dial hands the connection to the one transport that sends the request
// on it, once: a second dial (a retry) gets nothing.
func (v *verifiedTLS) dial(context.Context, string, string) (net.Conn, error) {
	if v.taken.Swap(true) {
		return nil, errors.New("egressproxy: the verified connection is already used")
	}
	return v.conn, nil
}

// sendSecrets sends req, whose headers hold placeholders of secrets bound
// to host, on a connection of its own to host:port: the values are put
// in once TLS to host is verified, and the request is written on that
// connection and no other.
func (s *session) sendSecrets(ctx context.Context, req *http.Request, host string, port int) (*http.Response, error) {
	v, err := s.dialVerified(ctx, host, port)
	if err != nil {
		return nil, err
	}
	if err := v.placeSecrets(s.pol, port, req.Header); err != nil {
		v.counted.fail(err)
		_ = v.conn.Close()
		return nil, err
	}
	t := &http.Transport{
		Proxy:          nil,
		DialTLSContext: v.dial,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("egressproxy: a request with secrets goes over TLS only")
		},
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: responseHeaderTimeout,
	}
	resp, err := t.RoundTrip(req.WithContext(ctx))
	if err != nil {
		_ = v.conn.Close()
		return nil, err
	}
	return resp, nil
}

// intercept terminates the sandbox's TLS to host:port with a certificate
// of the sandbox's CA and serves its requests with their secrets put in,
// over TLS to the host verified against the upstream roots (forward).
func (s *session) intercept(ctx context.Context, c net.Conn, br *bufio.Reader, host string, port int) {
	cert, err := s.pol.CA.leaf(host)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(s.p.cfg.HandshakeTimeout))
	tc := tls.Server(&bufferedConn{Conn: c, r: br}, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	defer tc.Close()
	if err := tc.HandshakeContext(ctx); err != nil {
		return
	}
	tbr := bufio.NewReader(tc)
	target := net.JoinHostPort(host, strconv.Itoa(port))
	for {
		_ = c.SetReadDeadline(time.Now().Add(s.p.cfg.HandshakeTimeout))
		req, err := http.ReadRequest(tbr)
		if err != nil {
			return
		}
		req.URL.Scheme, req.URL.Host = "https", target
		if !s.forward(ctx, tc, req) {
			return
		}
	}
}

// bufferedConn reads first what a bufio.Reader already holds.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }
