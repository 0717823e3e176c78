package launch

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/logging"
)

// EtcdConfig is the configuration of `conch etcd`: one member of a static
// etcd cluster, for running a cluster from the conch binary alone.
type EtcdConfig struct {
	Name           string `flag:"name" env:"CONCH_ETCD_NAME" usage:"this member's name in --initial-cluster"`
	DataDir        string `flag:"data-dir" env:"CONCH_ETCD_DATA_DIR" usage:"directory of the member's data (created if missing; an existing member rejoins with it)"`
	ListenClient   string `flag:"listen-client" env:"CONCH_ETCD_LISTEN_CLIENT" default:"http://127.0.0.1:2379" usage:"client URL, advertised and listened on (a host name: on every address, at its port)"`
	ListenPeer     string `flag:"listen-peer" env:"CONCH_ETCD_LISTEN_PEER" default:"http://127.0.0.1:2380" usage:"peer URL, advertised and listened on as --listen-client is; must be this member's URL in --initial-cluster"`
	InitialCluster string `flag:"initial-cluster" env:"CONCH_ETCD_INITIAL_CLUSTER" usage:"every member as name=peerURL, comma separated"`
	ClusterToken   string `flag:"initial-cluster-token" env:"CONCH_ETCD_CLUSTER_TOKEN" default:"conch" usage:"token the members of one cluster share"`
	// With a CA, the member serves clients and peers over TLS and
	// accepts only certificates that CA signed (mTLS); its URLs are
	// https.
	TrustedCAFile string `flag:"trusted-ca-file" env:"CONCH_ETCD_TRUSTED_CA_FILE" usage:"CA whose certificates alone this member accepts from clients and peers (set: TLS, https URLs)"`
	CertFile      string `flag:"cert-file" env:"CONCH_ETCD_CERT_FILE" usage:"this member's certificate, for its clients and peers"`
	KeyFile       string `flag:"key-file" env:"CONCH_ETCD_KEY_FILE" usage:"key of --cert-file"`
	UnsafeNoFsync bool   `flag:"unsafe-no-fsync" env:"CONCH_ETCD_UNSAFE_NO_FSYNC" usage:"skip fsync (a machine crash may lose data; for tests and throwaway clusters)"`
	LogLevel      string `flag:"log-level" env:"CONCH_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
}

// memberFlags names the flag of each field of etcdx.MemberOptions.
var memberFlags = map[string]string{
	"Name": "--name", "Dir": "--data-dir", "ClientURL": "--listen-client",
	"PeerURL": "--listen-peer", "InitialCluster": "--initial-cluster",
}

// memberOptions is the etcdx form of c.
func (c *EtcdConfig) memberOptions() etcdx.MemberOptions {
	return etcdx.MemberOptions{
		Name: c.Name, Dir: c.DataDir, ClientURL: c.ListenClient, PeerURL: c.ListenPeer,
		InitialCluster: c.InitialCluster, ClusterToken: c.ClusterToken, UnsafeNoFsync: c.UnsafeNoFsync,
		TLS: c.tls(),
	}
}

// tls is the member's TLS, nil without a CA.
func (c *EtcdConfig) tls() *etcdx.ServerTLS {
	if c.TrustedCAFile == "" {
		return nil
	}
	return &etcdx.ServerTLS{CAFile: c.TrustedCAFile, CertFile: c.CertFile, KeyFile: c.KeyFile}
}

// Validate checks the member's settings.
func (c *EtcdConfig) Validate() error {
	if c.ClusterToken == "" {
		return config.Invalid("--initial-cluster-token", "must not be empty")
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return config.Invalid("--log-level", "%v", err)
	}
	if c.TrustedCAFile != "" && (c.CertFile == "" || c.KeyFile == "") {
		return config.Invalid("--cert-file", "--cert-file and --key-file are required with --trusted-ca-file")
	}
	var bad *etcdx.OptionError
	if err := c.memberOptions().Validate(); errors.As(err, &bad) {
		return config.Invalid(memberFlags[bad.Option], "%v", bad.Err)
	} else if err != nil {
		return err
	}
	return nil
}

// RunEtcd runs `conch etcd` until ctx ends, then closes the member, which
// hands leadership over if it leads.
func RunEtcd(ctx context.Context, cfg EtcdConfig) error {
	lvl, err := logging.ParseLevel(cfg.LogLevel)
	if err != nil {
		return err
	}
	log := logging.New(os.Stderr, lvl).With("member", cfg.Name)
	opts := cfg.memberOptions()
	opts.Logger = log
	m, err := etcdx.StartMember(ctx, opts)
	if err != nil {
		return err
	}
	defer m.Close()
	log.Info("etcd member started", "client_url", cfg.ListenClient, "peer_url", cfg.ListenPeer)
	ready := m.Ready()
	for {
		select {
		case <-ready:
			log.Info("etcd member serving")
			ready = nil
		case err := <-m.Err():
			return fmt.Errorf("etcd member %s: %w", cfg.Name, err)
		case <-ctx.Done():
			log.Info("etcd member stopping")
			return nil
		}
	}
}
