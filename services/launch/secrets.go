package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/approval"
	approvalstore "github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/logging"
	"github.com/conch-sh/conch/services/internal/platform/seal"
	"github.com/conch-sh/conch/services/router/gateways"
)

// SecretsRotateConfig is the configuration of `conch secrets rotate`: how
// to reach etcd, and the keyring the services use, the new key first.
type SecretsRotateConfig struct {
	EtcdClientConfig
	seal.KeyConfig
}

// Validate checks the settings.
func (c *SecretsRotateConfig) Validate() error {
	if err := c.EtcdClientConfig.Validate(); err != nil {
		return err
	}
	return c.KeyConfig.Validate()
}

// RunSecretsRotate runs `conch secrets rotate`: it re-seals, with the
// active key, every stored secret sealed with another key or stored before
// secrets were sealed, and writes what it did to out. It is safe while the
// services run (every rewrite compares the record's revision) and does
// nothing the second time. Once it succeeds, the older keys can be removed
// from the keyring.
func RunSecretsRotate(ctx context.Context, cfg SecretsRotateConfig, out io.Writer) error {
	keys, err := cfg.Keyring()
	if err != nil {
		return err
	}
	etcdTLS, err := cfg.etcdTLS()
	if err != nil {
		return err
	}
	cli, err := etcdx.NewClient(ctx, etcdx.ClientOptions{
		Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second, RequestTimeout: cfg.EtcdRequestTimeout,
		Logger: logging.New(os.Stderr, slog.LevelWarn), TLS: etcdTLS,
	})
	if err != nil {
		return err
	}
	defer func() { _ = cli.Close() }()
	err = reseal(ctx, cli, keys, func(what string, p seal.Pass) {
		fmt.Fprintf(out, "%s: %d stored, %d re-sealed with key %s\n", what, p.Records, p.Resealed, keys.ActiveID())
	})
	if err != nil {
		return fmt.Errorf("secrets rotate: some secrets are not re-sealed; keep the older keys until a run succeeds: %w", err)
	}
	fmt.Fprintf(out, "every stored secret is sealed with key %s; older keys may now be removed\n", keys.ActiveID())
	return nil
}

// reseal re-seals every stored secret that is not sealed with the active
// key of keys: the gateways' (router) and the forwarding configs'
// (approval service). It reports each kind of record to report, and goes
// on past records it cannot re-seal, returning their errors.
func reseal(ctx context.Context, cli *clientv3.Client, keys *seal.Keyring, report func(what string, p seal.Pass)) error {
	// Re-sealing changes no URL, so the store needs no outbound guard.
	gws, err := gateways.New(cli, keys, nil, nil)
	if err != nil {
		return err
	}
	fwd, err := approvalstore.New(cli, approval.KeyPrefix, keys)
	if err != nil {
		return err
	}
	var failed []error
	for _, kind := range []struct {
		what string
		run  func(context.Context) (seal.Pass, error)
	}{
		{"gateways", gws.Reseal},
		{"approval forwarding configs", fwd.ResealForwarding},
	} {
		p, err := kind.run(ctx)
		report(kind.what, p)
		if err != nil {
			failed = append(failed, err)
		}
	}
	return errors.Join(failed...)
}
