package etcdx

import (
	"bytes"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/conch-sh/conch/services/internal/platform/pki"
)

// TestEmbeddedTLSAndAuth: an embedded etcd with TLS and auth yields
// nothing to a network path alone: not over plain HTTP (etcd's JSON
// gateway included), not over TLS without a client certificate or with
// one of another CA, not to a certificate of its own CA whose common name
// is no user; root's certificate reads and writes.
func TestEmbeddedTLSAndAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := pki.LoadOrCreateCA(dir+"/pki", "test etcd")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue("etcd", "etcd", "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	rootPair, err := ca.Issue("root", "root")
	if err != nil {
		t.Fatal(err)
	}
	strangerPair, err := ca.Issue("stranger", "stranger")
	if err != nil {
		t.Fatal(err)
	}
	root, err := pki.ClientConfig(ca.CAFile(), rootPair)
	if err != nil {
		t.Fatal(err)
	}
	e, err := StartEmbedded(t.Context(), EmbeddedOptions{Dir: dir + "/etcd", UnsafeNoFsync: true,
		TLS: &ServerTLS{CAFile: ca.CAFile(), CertFile: server.CertFile, KeyFile: server.KeyFile, Root: root}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ep := e.Endpoints()[0]
	if !strings.HasPrefix(ep, "https://") {
		t.Fatalf("endpoint %s is not https", ep)
	}
	cli, err := NewClient(t.Context(), ClientOptions{Endpoints: e.Endpoints(), TLS: root})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(t.Context(), "conch/gateways/acct/secret", "sk-secret"); err != nil {
		t.Fatalf("root put: %v", err)
	}
	// A call made while serving a request carries none of its metadata:
	// grpc-gateway's authorization (a tenant's API key) would reach etcd,
	// which reads it as an auth token of its own.
	served := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer conch_tenant_key", "conch-account", "acct")
	if _, err := cli.Get(served, "conch/gateways/acct/secret"); err != nil {
		t.Fatalf("a read while serving a request: %v", err)
	}

	// etcd's JSON gateway, as an SSRF would reach it.
	body := []byte(`{"key": "Y29uY2gv", "range_end": "Y29uY2gw"}`) // conch/ .. conch0
	hc := func(cfg *tls.Config) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	otherCA, err := pki.LoadOrCreateCA(dir+"/other", "other")
	if err != nil {
		t.Fatal(err)
	}
	otherPair, err := otherCA.Issue("root", "root")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.ClientConfig(ca.CAFile(), otherPair)
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := pki.ClientConfig(ca.CAFile(), pki.Pair{})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := pki.ClientConfig(ca.CAFile(), strangerPair)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		url  string
		c    *http.Client
	}{
		{"plain http", strings.Replace(ep, "https://", "http://", 1), hc(nil)},
		{"tls without a client certificate", ep, hc(noCert)},
		{"a certificate of another CA", ep, hc(other)},
		{"a certificate of no user", ep, hc(stranger)},
	}
	for _, tc := range cases {
		resp, err := tc.c.Post(tc.url+"/v3/kv/range", "application/json", bytes.NewReader(body))
		if err != nil {
			continue
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(b.String(), "c2stc2VjcmV0") { // sk-secret
			t.Errorf("%s: %d %s", tc.name, resp.StatusCode, b.String())
		}
	}
	// Nor a write, through the client library.
	sc, err := NewClient(t.Context(), ClientOptions{Endpoints: e.Endpoints(), TLS: stranger, DialTimeout: 2 * time.Second})
	if err == nil {
		_, err = sc.Put(t.Context(), "conch/apikeys/x", "{}")
		sc.Close()
	}
	if err == nil {
		t.Error("a certificate of no user wrote")
	}
	if r, err := cli.Get(t.Context(), "conch/apikeys/x"); err != nil || len(r.Kvs) != 0 {
		t.Errorf("the write landed: %v %v", r, err)
	}
}
