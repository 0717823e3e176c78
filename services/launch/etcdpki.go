package launch

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/pki"
)

// Names of the certificates `conch etcd-pki` makes in its directory; each
// is NAME.pem with its key in NAME-key.pem, beside the CA's ca.pem and
// ca-key.pem.
const (
	// EtcdMemberCert is the certificate every etcd member serves its
	// clients and peers with, and dials its peers with.
	EtcdMemberCert = "etcd"
	// EtcdRootCert is the client certificate of etcd's root user: for
	// `conch etcd-auth` and `conch secrets rotate`, never a service.
	EtcdRootCert = "root"
)

// etcdPKILocalHosts are names every member certificate covers besides the
// members' own, so that a member can be reached on its own machine.
var etcdPKILocalHosts = []string{"localhost", "127.0.0.1"}

// EtcdPKIConfig is the configuration of `conch etcd-pki`: where to keep
// the control plane's certificates and which names the members answer to.
type EtcdPKIConfig struct {
	Dir   string   `flag:"dir" env:"CONCH_ETCD_PKI_DIR" usage:"directory of the CA and the certificates (created if missing; existing files are kept)"`
	Hosts []string `flag:"hosts" env:"CONCH_ETCD_PKI_HOSTS" usage:"names and addresses of the etcd members, comma separated (localhost and 127.0.0.1 are added)"`
}

// Validate checks the settings.
func (c *EtcdPKIConfig) Validate() error {
	if c.Dir == "" {
		return config.Invalid("--dir", "is required")
	}
	if len(c.Hosts) == 0 {
		return config.Invalid("--hosts", "at least one member host is required")
	}
	return nil
}

// EtcdPKIFile is one certificate `conch etcd-pki` keeps: its file name
// (the key is beside it) and the etcd user its common name makes it.
type EtcdPKIFile struct {
	Name, User string
	Hosts      []string
}

// EtcdPKIFiles are the certificates of an etcd cluster whose members
// answer to hosts: the members' own, root's, and one per service of
// EtcdUsers, named and authenticated as the service.
func EtcdPKIFiles(hosts []string) []EtcdPKIFile {
	out := []EtcdPKIFile{
		{Name: EtcdMemberCert, User: EtcdMemberCert, Hosts: slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(hosts), etcdPKILocalHosts...))))},
		{Name: EtcdRootCert, User: EtcdRootCert},
	}
	for _, svc := range slices.Sorted(maps.Keys(EtcdUsers)) {
		out = append(out, EtcdPKIFile{Name: svc, User: svc})
	}
	return out
}

// EtcdPKI is what MakeEtcdPKI made: the CA's certificate, and each
// certificate of EtcdPKIFiles by name.
type EtcdPKI struct {
	CAFile string
	Pairs  map[string]pki.Pair
}

// MakeEtcdPKI makes the CA and every certificate of EtcdPKIFiles(hosts)
// in dir, keeping those that are there and still valid: the one maker of
// etcd's certificates, for `conch etcd-pki`, `conch dev` and the local
// cluster.
func MakeEtcdPKI(dir string, hosts []string) (*EtcdPKI, error) {
	ca, err := pki.LoadOrCreateCA(dir, "conch etcd CA")
	if err != nil {
		return nil, err
	}
	made := &EtcdPKI{CAFile: ca.CAFile(), Pairs: map[string]pki.Pair{}}
	for _, f := range EtcdPKIFiles(hosts) {
		p, err := ca.Issue(f.Name, f.User, f.Hosts...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		made.Pairs[f.Name] = p
	}
	return made, nil
}

// RunEtcdPKI runs `conch etcd-pki`: MakeEtcdPKI in cfg.Dir, then a list
// of the files on out. Run again after deleting a file, it makes that one
// anew; after deleting the CA, all of them.
func RunEtcdPKI(cfg EtcdPKIConfig, out io.Writer) error {
	made, err := MakeEtcdPKI(cfg.Dir, cfg.Hosts)
	if err != nil {
		return fmt.Errorf("etcd-pki: %w", err)
	}
	fmt.Fprintf(out, "%s\tCA: what members and clients trust\n", made.CAFile)
	for _, f := range EtcdPKIFiles(cfg.Hosts) {
		p := made.Pairs[f.Name]
		what := "client, etcd user " + f.User
		if len(f.Hosts) > 0 {
			what = "etcd members"
		}
		fmt.Fprintf(out, "%s\t%s (key %s)\n", p.CertFile, what, filepath.Base(p.KeyFile))
	}
	return nil
}
