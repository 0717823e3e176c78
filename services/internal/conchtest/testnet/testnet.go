// Package testnet stands up a small "internet" for tests of sandbox
// egress: a network namespace the test creates, joined to the host by a
// veth pair with addresses from a documentation range (RFC 5737), with an
// HTTP server on port 80, an HTTPS one on 443 and a plain one on 8080;
// /bytes/N answers N zero bytes, /headers the request's headers, /simple/
// is a package index (PEP 503) holding one wheel, conchdemo 1.0. Every
// request the servers read is kept (Requests), so that a test can say
// what reached the internet, and how.
// Traffic to it is real routing, and reaches nothing but that namespace.
// It needs root.
package testnet

import (
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
	"net/http/cgi"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Greeting is the body every server of the internet answers with,
// followed by the request's host and path.
const Greeting = "hello from the test internet"

// Internet is a namespace with servers in it.
type Internet struct {
	// Addr is the servers' address, in the namespace.
	Addr netip.Addr
	// HostAddr is the host's end of the link: an address of the host.
	HostAddr netip.Addr
	// Roots verify the HTTPS server, whose certificate names every
	// conch.test name and Addr; RootPEM is that certificate, for a
	// process that reads its roots from a file (SSL_CERT_FILE).
	Roots   *x509.CertPool
	RootPEM []byte

	git atomic.Pointer[cgi.Handler]

	mu       sync.Mutex
	requests []Request
}

// Request is what a server of the internet read of one request.
type Request struct {
	// TLS is set for a request read over TLS (port 443).
	TLS bool
	// Head is its request line and headers, Host among them.
	Head string
}

// Requests returns the requests the servers have read so far.
func (in *Internet) Requests() []Request {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.requests)
}

func (in *Internet) keep(r *http.Request) {
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s %s\r\nHost: %s\r\n", r.Method, r.RequestURI, r.Proto, r.Host)
	_ = r.Header.Write(&head)
	in.mu.Lock()
	defer in.mu.Unlock()
	in.requests = append(in.requests, Request{TLS: r.TLS != nil, Head: head.String()})
}

// ServeGit makes a bare repository with one commit on main, served by
// git's smart HTTP backend at /git/repo.git on every server; it returns
// the commit.
func (in *Internet) ServeGit(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	work := filepath.Join(t.TempDir(), "work")
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@conch.test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@conch.test")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git(root, "init", "-q", "--bare", "-b", "main", "repo.git")
	git(root, "init", "-q", "-b", "main", work)
	if err := os.WriteFile(filepath.Join(work, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(work, "add", "README")
	git(work, "commit", "-q", "-m", "first")
	git(work, "push", "-q", filepath.Join(root, "repo.git"), "main")
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatal(err)
	}
	in.git.Store(&cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"), Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	})
	return git(work, "rev-parse", "HEAD")
}

// Start creates the namespace and its servers; the test's cleanup removes
// them. Each Internet takes one /30 of 198.51.100.0/24, claimed by a lock
// file so that test processes running side by side never share one.
func Start(t testing.TB) *Internet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("testnet: needs root to create a network namespace")
	}
	slot := claimSlot(t)
	name := fmt.Sprintf("conchtn%d", slot)
	hostIf, nsIf := fmt.Sprintf("ctnh%d", slot), fmt.Sprintf("ctnn%d", slot)
	base := [4]byte{198, 51, 100, byte(slot * 4)}
	host := netip.AddrFrom4([4]byte{base[0], base[1], base[2], base[3] + 1})
	ns := netip.AddrFrom4([4]byte{base[0], base[1], base[2], base[3] + 2})
	// Leftovers of a test process that was killed.
	_ = exec.Command("ip", "netns", "del", name).Run()
	_ = exec.Command("ip", "link", "del", hostIf).Run()
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	run("link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	run("link", "set", nsIf, "netns", name)
	run("addr", "add", host.String()+"/30", "dev", hostIf)
	run("link", "set", hostIf, "up")
	run("-n", name, "addr", "add", ns.String()+"/30", "dev", nsIf)
	run("-n", name, "link", "set", nsIf, "up")
	run("-n", name, "link", "set", "lo", "up")

	in := &Internet{Addr: ns, HostAddr: host}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.keep(r)
		if n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/bytes/"), 10, 64); err == nil && strings.HasPrefix(r.URL.Path, "/bytes/") {
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			buf := make([]byte, 256<<10)
			for n > 0 {
				k, err := w.Write(buf[:min(n, int64(len(buf)))])
				if err != nil {
					return
				}
				n -= int64(k)
			}
			return
		}
		if h := in.git.Load(); h != nil && strings.HasPrefix(r.URL.Path, "/git/") {
			h.ServeHTTP(w, r)
			return
		}
		if serveIndex(w, r) {
			return
		}
		if r.URL.Path == "/headers" {
			_ = r.Header.Write(w)
			return
		}
		fmt.Fprintf(w, "%s %s%s\n", Greeting, r.Host, r.URL.Path)
	})
	for _, port := range []int{80, 8080} {
		s := httptest.NewUnstartedServer(handler)
		s.Listener = listenIn(t, name, netip.AddrPortFrom(ns, uint16(port)))
		s.Start()
		t.Cleanup(s.Close)
	}
	s := httptest.NewUnstartedServer(handler)
	s.Listener = listenIn(t, name, netip.AddrPortFrom(ns, 443))
	cert, roots := selfSigned(t, ns)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.StartTLS()
	t.Cleanup(s.Close)
	in.Roots, in.RootPEM = roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	return in
}

// selfSigned is a certificate for every conch.test name and addr, and the
// pool that trusts it.
func selfSigned(t testing.TB, addr netip.Addr) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "conch.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
		DNSNames: []string{"conch.test", "*.conch.test"}, IPAddresses: []net.IP{addr.AsSlice()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// listenIn listens on addr inside the named network namespace: the socket
// is made by a thread that entered it, and stays there.
func listenIn(t testing.TB, ns string, addr netip.AddrPort) net.Listener {
	t.Helper()
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread is left to die with its goroutine rather than go
		// back to the pool in another namespace, should returning fail.
		runtime.LockOSThread()
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		l, err := net.Listen("tcp", addr.String())
		ch <- result{l, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("testnet: listen on %s in %s: %v", addr, ns, r.err)
	}
	return r.l
}

// claimSlot takes one of 64 /30s for the test's lifetime.
func claimSlot(t testing.TB) int {
	t.Helper()
	for slot := range 64 {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), fmt.Sprintf("conch-testnet-%d.lock", slot)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() })
		return slot
	}
	t.Fatal("testnet: all 64 slots are taken")
	return 0
}

// Resolver answers for test names: names under "conch.test" resolve to
// the internet's address, except those the test maps elsewhere; any other
// name does not resolve, so that nothing leaves for real DNS.
type Resolver struct {
	Internet *Internet
	// Names map a name to the addresses it resolves to instead.
	Names map[string][]netip.Addr
}

// LookupNetIP resolves host.
func (r *Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r.Names[host]; ok {
		return a, nil
	}
	if host == "conch.test" || strings.HasSuffix(host, ".conch.test") {
		return []netip.Addr{r.Internet.Addr}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}
