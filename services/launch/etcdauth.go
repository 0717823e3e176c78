package launch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/logging"
)

// etcdAuthRetry is the pause between attempts of `conch etcd-auth` while
// etcd does not answer yet.
const etcdAuthRetry = 2 * time.Second

// EtcdAuthConfig is the configuration of `conch etcd-auth`: how to reach
// etcd as its root user, and how long to wait for it to answer.
type EtcdAuthConfig struct {
	EtcdClientConfig
	Wait     time.Duration `flag:"wait" env:"CONCH_ETCD_AUTH_WAIT" default:"2m" usage:"how long to retry while etcd does not answer (members still starting)"`
	LogLevel string        `flag:"log-level" env:"CONCH_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
}

// Validate checks the settings: root's certificate is required, since
// etcd takes the user from it.
func (c *EtcdAuthConfig) Validate() error {
	if err := c.EtcdClientConfig.Validate(); err != nil {
		return err
	}
	if c.EtcdCertFile == "" {
		return config.Invalid("--etcd-cert-file", "root's client certificate is required")
	}
	if c.Wait <= 0 {
		return config.Invalid("--wait", "must be positive")
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return config.Invalid("--log-level", "%v", err)
	}
	return nil
}

// RunEtcdAuth runs `conch etcd-auth`: it makes each service of EtcdUsers
// an etcd user limited to its key prefixes, then turns etcd's
// authentication on, retrying for up to cfg.Wait while etcd does not
// answer. Users come first so that no service is refused for want of its
// user once authentication is on. Run again, it changes nothing that is
// right already, so a deployment runs it on every install and upgrade.
func RunEtcdAuth(ctx context.Context, cfg EtcdAuthConfig, out io.Writer) error {
	lvl, err := logging.ParseLevel(cfg.LogLevel)
	if err != nil {
		return err
	}
	log := logging.New(os.Stderr, lvl)
	root, err := cfg.etcdTLS()
	if err != nil {
		return fmt.Errorf("etcd-auth: %w", err)
	}
	if err := isRoot(root); err != nil {
		return fmt.Errorf("etcd-auth: --etcd-cert-file: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Wait)
	defer cancel()
	for {
		err := EnableEtcdAuth(ctx, cfg.EtcdEndpoints, root)
		if err == nil {
			break
		}
		log.Warn("etcd auth not set up yet; retrying", "err", err, "retry_in", etcdAuthRetry)
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd-auth: gave up after %v: %w", cfg.Wait, err)
		case <-time.After(etcdAuthRetry):
		}
	}
	fmt.Fprintf(out, "etcd authentication is on; users %s each limited to their key prefixes\n", etcdUserNames())
	return nil
}

// EnableEtcdAuth makes each service of EtcdUsers an etcd user limited to
// its key prefixes, then turns etcd's authentication on, as root: one
// attempt of RunEtcdAuth, and the local cluster's step.
func EnableEtcdAuth(ctx context.Context, endpoints []string, root *tls.Config) error {
	if err := etcdx.EnsureUsers(ctx, endpoints, root, EtcdUsers); err != nil {
		return err
	}
	return etcdx.EnableAuth(ctx, endpoints, root)
}

// isRoot checks that cfg presents a certificate of etcd's root user:
// with another, authentication would lock it out once on.
func isRoot(cfg *tls.Config) error {
	if cfg == nil || len(cfg.Certificates) == 0 {
		return errors.New("root's client certificate is required")
	}
	cert, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		return err
	}
	if cn := cert.Subject.CommonName; cn != EtcdRootCert {
		return fmt.Errorf("certificate of user %q, want %q", cn, EtcdRootCert)
	}
	return nil
}

// etcdUserNames are the services' etcd users, for messages.
func etcdUserNames() []string { return slices.Sorted(maps.Keys(EtcdUsers)) }
