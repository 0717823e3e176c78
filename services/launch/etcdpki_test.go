package launch

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readCert parses the certificate in dir/name.pem.
func readCert(t *testing.T, dir, name string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name+".pem"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s.pem is not PEM", name)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEtcdPKIMakesEveryCertificate: the CA signs a member certificate
// valid for the hosts and the local names, and one client certificate per
// etcd user whose common name is the user; keys are private to the owner.
func TestEtcdPKIMakesEveryCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := RunEtcdPKI(EtcdPKIConfig{Dir: dir, Hosts: []string{"etcd-0", "etcd-1.etcd.conch.svc", "10.0.0.5"}}, io.Discard); err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, dir, "ca")
	tests := []struct {
		name, cn  string
		dns       []string
		ips       []string
		serverUse bool
	}{
		{name: "etcd", cn: "etcd", dns: []string{"etcd-0", "etcd-1.etcd.conch.svc", "localhost"}, ips: []string{"10.0.0.5", "127.0.0.1"}, serverUse: true},
		{name: "root", cn: "root"},
		{name: "router", cn: "router"},
		{name: "executor", cn: "executor"},
		{name: "approval", cn: "approval"},
		{name: "workspace", cn: "workspace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := readCert(t, dir, tt.name)
			if err := c.CheckSignatureFrom(ca); err != nil {
				t.Errorf("not signed by the CA: %v", err)
			}
			if c.Subject.CommonName != tt.cn {
				t.Errorf("common name %q, want %q", c.Subject.CommonName, tt.cn)
			}
			var ips []string
			for _, ip := range c.IPAddresses {
				ips = append(ips, ip.String())
			}
			slices.Sort(ips)
			if d := cmp.Diff(tt.dns, slices.Sorted(slices.Values(c.DNSNames))); d != "" {
				t.Errorf("DNS names (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.ips, ips); d != "" {
				t.Errorf("IP addresses (-want +got):\n%s", d)
			}
			if got := slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth); got != tt.serverUse {
				t.Errorf("server auth %v, want %v", got, tt.serverUse)
			}
			if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
				t.Error("not a client certificate")
			}
			for _, f := range []string{tt.name + ".pem", tt.name + "-key.pem"} {
				if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: %v, mode %v; want 0600", f, err, fi.Mode().Perm())
				}
			}
		})
	}
	var users []string
	for _, f := range EtcdPKIFiles(nil) {
		users = append(users, f.User)
	}
	if want := append([]string{"etcd", "root"}, etcdUserNames()...); !slices.Equal(users, want) {
		t.Errorf("certificates of %v, want %v: a service of EtcdUsers has none", users, want)
	}
}

// TestEtcdPKIKeepsFiles: a second run changes nothing; a deleted file is
// made anew alone; a new member host makes the member certificate anew; a
// new CA makes every certificate anew.
func TestEtcdPKIKeepsFiles(t *testing.T) {
	t.Parallel()
	hosts := []string{"etcd-0", "etcd-1"}
	tests := []struct {
		name    string
		change  func(dir string) error
		hosts   []string
		renewed []string // files whose content changes; the others stay
	}{
		{name: "second run", change: func(string) error { return nil }, hosts: hosts},
		{name: "deleted key", change: func(dir string) error { return os.Remove(filepath.Join(dir, "router-key.pem")) }, hosts: hosts,
			renewed: []string{"router.pem", "router-key.pem"}},
		{name: "deleted certificate", change: func(dir string) error { return os.Remove(filepath.Join(dir, "etcd.pem")) }, hosts: hosts,
			renewed: []string{"etcd.pem", "etcd-key.pem"}},
		{name: "new member", change: func(string) error { return nil }, hosts: append(slices.Clone(hosts), "etcd-2"),
			renewed: []string{"etcd.pem", "etcd-key.pem"}},
		{name: "new CA", change: func(dir string) error { return os.Remove(filepath.Join(dir, "ca.pem")) }, hosts: hosts,
			renewed: []string{"ca.pem", "ca-key.pem", "etcd.pem", "etcd-key.pem", "root.pem", "root-key.pem",
				"approval.pem", "approval-key.pem", "executor.pem", "executor-key.pem", "router.pem", "router-key.pem",
				"workspace.pem", "workspace-key.pem"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := RunEtcdPKI(EtcdPKIConfig{Dir: dir, Hosts: hosts}, io.Discard); err != nil {
				t.Fatal(err)
			}
			before := readDir(t, dir)
			if err := tt.change(dir); err != nil {
				t.Fatal(err)
			}
			if err := RunEtcdPKI(EtcdPKIConfig{Dir: dir, Hosts: tt.hosts}, io.Discard); err != nil {
				t.Fatal(err)
			}
			after := readDir(t, dir)
			if d := cmp.Diff(slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after))); d != "" {
				t.Fatalf("files (-before +after):\n%s", d)
			}
			var renewed []string
			for name, b := range before {
				if !bytes.Equal(b, after[name]) {
					renewed = append(renewed, name)
				}
			}
			if d := cmp.Diff(slices.Sorted(slices.Values(tt.renewed)), slices.Sorted(slices.Values(renewed))); d != "" {
				t.Errorf("renewed files (-want +got):\n%s", d)
			}
		})
	}
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}
