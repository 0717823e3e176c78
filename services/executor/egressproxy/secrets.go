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
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/conch-sh/conch/services/internal/egress"
)

// Secret is a value the sandbox uses without holding it: its programs see
// Placeholder, which the proxy replaces with Value in requests to the
// hosts of Allow (in Header alone, when set).
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
		SerialNumber:          serial(),
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

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
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
		SerialNumber: serial(),
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

// placeSecrets puts the values of the secrets bound to host in place of
// their placeholders in h; a placeholder of any other secret (or of a
// bound one outside its header) refuses the request.
func (s *session) placeSecrets(host string, port int, h http.Header) error {
	bound := map[string]Secret{}
	for _, sec := range s.secretsFor(host) {
		bound[sec.Placeholder] = sec
	}
	for name, values := range h {
		for i, v := range values {
			for _, sec := range s.pol.Secrets {
				if !strings.Contains(v, sec.Placeholder) {
					continue
				}
				b, ok := bound[sec.Placeholder]
				if !ok || (b.Header != "" && !strings.EqualFold(b.Header, name)) {
					return &Refused{Host: host, Port: port, Gateway: s.pol.Gateway, Why: "the request carries a secret's placeholder (header " + name + ") that is not bound to this host"}
				}
				v = strings.ReplaceAll(v, sec.Placeholder, sec.Value)
			}
			values[i] = v
		}
	}
	return nil
}

// intercept terminates the sandbox's TLS to host:port with a certificate
// of the sandbox's CA and serves its requests with their secrets put in,
// over TLS to the host verified against the system's roots.
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
