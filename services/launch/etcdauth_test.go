package launch

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/pki"
)

// TestEtcdAuth runs `conch etcd-pki` and `conch etcd-auth` (twice, as a
// deployment does on every upgrade) against a real etcd that serves mTLS
// with its authentication still off: afterwards each service's
// certificate reads and writes exactly its prefixes, a certificate of no
// user (the members') is refused, and etcd-auth refuses to run as anyone
// but root.
func TestEtcdAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	if err := RunEtcdPKI(EtcdPKIConfig{Dir: pkiDir, Hosts: []string{"etcd-0"}}, io.Discard); err != nil {
		t.Fatal(err)
	}
	pair := func(name string) pki.Pair {
		return pki.Pair{CertFile: filepath.Join(pkiDir, name+".pem"), KeyFile: filepath.Join(pkiDir, name+"-key.pem")}
	}
	caFile := filepath.Join(pkiDir, "ca.pem")
	member := pair(EtcdMemberCert)
	e, err := etcdx.StartEmbedded(t.Context(), etcdx.EmbeddedOptions{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true,
		TLS: &etcdx.ServerTLS{CAFile: caFile, CertFile: member.CertFile, KeyFile: member.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	authCfg := func(name string) EtcdAuthConfig {
		p := pair(name)
		return EtcdAuthConfig{
			EtcdClientConfig: EtcdClientConfig{EtcdEndpoints: e.Endpoints(), EtcdCAFile: caFile, EtcdCertFile: p.CertFile, EtcdKeyFile: p.KeyFile, EtcdRequestTimeout: 5 * time.Second},
			Wait:             30 * time.Second, LogLevel: "error",
		}
	}
	if err := RunEtcdAuth(t.Context(), authCfg("router"), io.Discard); err == nil || !strings.Contains(err.Error(), `want "root"`) {
		t.Fatalf("etcd-auth with router's certificate: %v, want a refusal naming root", err)
	}
	for range 2 {
		if err := RunEtcdAuth(t.Context(), authCfg(EtcdRootCert), io.Discard); err != nil {
			t.Fatal(err)
		}
	}

	client := func(t *testing.T, name string) *clientv3.Client {
		t.Helper()
		cfg := authCfg(name)
		tlsCfg, err := cfg.etcdTLS()
		if err != nil {
			t.Fatal(err)
		}
		cli, err := etcdx.NewClient(t.Context(), etcdx.ClientOptions{Endpoints: e.Endpoints(), TLS: tlsCfg, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	root := client(t, EtcdRootCert)
	if st, err := root.AuthStatus(t.Context()); err != nil || !st.Enabled {
		t.Fatalf("auth status %v, %v; want enabled", st, err)
	}
	// What was given by hand, or dropped from a service's list, does not
	// outlive the next run: a permission beside the service's own, and
	// root's role.
	if _, err := root.RoleGrantPermission(t.Context(), "router", "conch-elsewhere/", clientv3.GetPrefixRangeEnd("conch-elsewhere/"), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(t.Context(), "executor", "root"); err != nil {
		t.Fatal(err)
	}
	if err := RunEtcdAuth(t.Context(), authCfg(EtcdRootCert), io.Discard); err != nil {
		t.Fatal(err)
	}
	for user, perms := range EtcdUsers {
		t.Run(user, func(t *testing.T) {
			cli := client(t, user)
			for _, p := range perms {
				key := p.Prefix + "etcd-auth-test"
				if _, err := cli.Get(t.Context(), key); err != nil {
					t.Errorf("read %s: %v", key, err)
				}
				_, err := cli.Put(t.Context(), key, "v")
				if p.Write && err != nil {
					t.Errorf("write %s: %v", key, err)
				}
				if !p.Write && !errors.Is(err, rpctypes.ErrPermissionDenied) {
					t.Errorf("write %s (read only): %v, want permission denied", key, err)
				}
			}
			// Nothing outside its prefixes: another tenant's keys, the
			// auth settings.
			if _, err := cli.Get(t.Context(), "conch-elsewhere/x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
				t.Errorf("read outside its prefixes: %v, want permission denied", err)
			}
			if _, err := cli.UserList(t.Context()); err == nil {
				t.Error("listed etcd's users")
			}
		})
	}
	// The members' certificate is signed by the same CA but is no user's.
	memberCfg := authCfg(EtcdMemberCert)
	memberTLS, err := memberCfg.etcdTLS()
	if err != nil {
		t.Fatal(err)
	}
	if cli, err := etcdx.NewClient(t.Context(), etcdx.ClientOptions{Endpoints: e.Endpoints(), TLS: memberTLS, DialTimeout: 2 * time.Second}); err == nil {
		_, err = cli.Get(t.Context(), "conch/accounts/x")
		_ = cli.Close()
		if err == nil {
			t.Error("the members' certificate read a service's key")
		}
	}
}
