// Package pki makes the certificates conch's control plane authenticates
// with: a certificate authority kept in a directory, and server and
// client certificates it signs. `conch dev` keeps one in its data dir, so
// that its etcd accepts only clients holding a certificate of its own.
//
// Keys are ECDSA P-256, certificates last ten years (they never leave
// the machine or the deployment that made them), and files are written
// with mode 0600 in a directory of mode 0700.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// validity is how long certificates last.
const validity = 10 * 365 * 24 * time.Hour

// CA is a certificate authority whose certificate and key live in Dir.
type CA struct {
	Dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// CAFile is the CA certificate's path: what clients and servers trust.
func (ca *CA) CAFile() string { return filepath.Join(ca.Dir, "ca.pem") }

// LoadOrCreateCA loads the CA kept in dir, or makes one there.
func LoadOrCreateCA(dir, name string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	ca := &CA{Dir: dir}
	cert, key, err := load(ca.CAFile(), filepath.Join(dir, "ca-key.pem"))
	switch {
	case err == nil:
		ca.cert, ca.key = cert, key
		return ca, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          Serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	ca.key = key
	if err := write(ca.CAFile(), filepath.Join(dir, "ca-key.pem"), der, key); err != nil {
		return nil, err
	}
	return ca, nil
}

// Pair names a certificate and its key on disk.
type Pair struct{ CertFile, KeyFile string }

// Issue returns the certificate named name in the CA's directory, making
// it if it is missing, was signed by another CA, names another subject or
// does not cover every one of hosts: for a server when hosts (names and
// addresses) are given, for a client otherwise, with commonName as its
// subject (etcd takes a client's user name from it).
func (ca *CA) Issue(name, commonName string, hosts ...string) (Pair, error) {
	p := Pair{CertFile: filepath.Join(ca.Dir, name+".pem"), KeyFile: filepath.Join(ca.Dir, name+"-key.pem")}
	if cert, _, err := load(p.CertFile, p.KeyFile); err == nil && cert.CheckSignatureFrom(ca.cert) == nil &&
		cert.Subject.CommonName == commonName && covers(cert, hosts) {
		return p, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: Serial(),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		// A server also dials its peers as a client.
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: %w", err)
	}
	return p, write(p.CertFile, p.KeyFile, der, key)
}

// ClientConfig is the TLS configuration of a client that trusts caFile
// and presents the pair (none when p is empty).
func ClientConfig(caFile string, p Pair) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("pki: %s holds no certificate", caFile)
		}
	}
	if p.CertFile != "" {
		c, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// covers reports whether cert is valid for every one of hosts: a member
// added to the list needs a certificate that names it.
func covers(cert *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// Serial is a random serial number for a new certificate: 127 bits, as
// RFC 5280 asks (positive, at most 20 octets) with room to spare.
func Serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)) // crypto/rand does not fail
	return n
}

func load(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	c, _ := pem.Decode(cb)
	k, _ := pem.Decode(kb)
	if c == nil || k == nil {
		return nil, nil, fmt.Errorf("pki: %s or %s is not PEM", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(c.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: %w", certFile, err)
	}
	key, err := x509.ParseECPrivateKey(k.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: %w", keyFile, err)
	}
	return cert, key, nil
}

func write(certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}
