package launch

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/executor"
	"github.com/conch-sh/conch/services/internal/ceiling"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/dirlock"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/logging"
	"github.com/conch-sh/conch/services/internal/platform/pki"
	"github.com/conch-sh/conch/services/internal/platform/seal"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/internal/signing"
	"github.com/conch-sh/conch/services/router"
	"github.com/conch-sh/conch/services/router/accounts"
	"github.com/conch-sh/conch/services/workspace"
)

// DevAccount is the account of the dev-mode API key.
const DevAccount = "dev"

// devLockHolder is what holds a data dir in use by conch dev, as a second
// one is told.
const devLockHolder = "conch dev"

// DevConfig is the configuration of `conch dev`
// (docs/reference/configuration.md).
type DevConfig struct {
	HTTPAddr    string `flag:"http-addr" env:"CONCH_HTTP_ADDR" default:"127.0.0.1:8080" usage:"public HTTP listen address"`
	DataDir     string `flag:"data-dir" env:"CONCH_DATA_DIR" default:"./.conch" usage:"where etcd data, workspaces and the API key live"`
	APIKey      string `env:"CONCH_API_KEY" usage:"API key of the dev account, at least 16 characters without spaces (default: random, written to <data-dir>/api-key)"`
	PublicURL   string `flag:"public-url" env:"CONCH_PUBLIC_URL" usage:"public base URL of the router (default: the request's host)"`
	S3Endpoint  string `env:"CONCH_S3_ENDPOINT" usage:"S3 endpoint for workspaces (default: local disk under the data dir)"`
	S3AccessKey string `env:"CONCH_S3_ACCESS_KEY" usage:"S3 access key"`
	S3SecretKey string `env:"CONCH_S3_SECRET_KEY" usage:"S3 secret key"`
	S3Bucket    string `env:"CONCH_S3_BUCKET" default:"conch" usage:"S3 bucket for workspaces"`
	S3Secure    bool   `env:"CONCH_S3_SECURE" usage:"use HTTPS to reach S3"`
	SigningKeys string `env:"CONCH_SIGNING_KEYS" usage:"keys of public file URLs, id:secret[,id:secret...] (default: one kept in <data-dir>/signing-key)"`
	LogLevel    string `flag:"log-level" env:"CONCH_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
	// QuotaBytes and QuotaFiles default (0) to the gateways' defaults, as
	// in `conch workspace`.
	QuotaBytes int64 `env:"CONCH_WORKSPACE_QUOTA_BYTES" usage:"bytes one workspace may store (0: the default of 1 GiB)"`
	QuotaFiles int64 `env:"CONCH_WORKSPACE_QUOTA_FILES" usage:"files and directories one workspace may hold (0: the default of 100000)"`
	// Templates, as `conch workspace` takes them.
	workspace.TemplateConfig
	// EtcdQuotaBytes is the embedded etcd's backend quota.
	EtcdQuotaBytes int64 `flag:"etcd-quota-bytes" env:"CONCH_ETCD_QUOTA_BYTES" usage:"backend quota of the embedded etcd, in bytes: past it etcd raises NOSPACE and refuses writes (0: 2 GiB)"`
	router.HTTPConfig
	// Outbound is the operator's say over tenants' outbound connections,
	// as in every service.
	outbound.Config
	// AuditConfig keeps the audit trail under <data-dir>/audit unless it
	// says otherwise.
	approval.AuditConfig
	// KeyConfig seals stored secrets; unset, with a key kept in
	// <data-dir>/secrets-key, made on first start.
	seal.KeyConfig
	// Ceilings bound what tenants set, and Quotas what each account
	// holds, as in every service.
	Ceilings ceiling.Config
	Quotas   quotas.Config
	// Executor holds the sandboxes' settings, as in `conch executor`.
	Executor executor.Config
}

// Validate checks the dev settings.
func (c *DevConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return config.Invalid("--http-addr", "%v", err)
	}
	if strings.TrimSpace(c.DataDir) == "" {
		return config.Invalid("--data-dir", "must not be empty")
	}
	if c.APIKey != "" && (len(c.APIKey) < 16 || strings.ContainsAny(c.APIKey, " \t\r\n")) {
		return config.Invalid("CONCH_API_KEY", "must be at least 16 characters without spaces")
	}
	if c.QuotaBytes < 0 {
		return config.Invalid("CONCH_WORKSPACE_QUOTA_BYTES", "must not be negative")
	}
	if err := c.TemplateConfig.Validate(); err != nil {
		return err
	}
	if c.QuotaFiles < 0 {
		return config.Invalid("CONCH_WORKSPACE_QUOTA_FILES", "must not be negative")
	}
	if c.EtcdQuotaBytes < 0 {
		return config.Invalid("--etcd-quota-bytes", "must not be negative")
	}
	if c.S3Endpoint != "" && (c.S3AccessKey == "" || c.S3SecretKey == "") {
		return config.Invalid("CONCH_S3_ACCESS_KEY", "CONCH_S3_ACCESS_KEY and CONCH_S3_SECRET_KEY are required with CONCH_S3_ENDPOINT")
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return config.Invalid("--log-level", "%v", err)
	}
	if err := c.HTTPConfig.Validate(); err != nil {
		return err
	}
	if err := c.Ceilings.Validate(); err != nil {
		return err
	}
	if err := c.Quotas.Validate(); err != nil {
		return err
	}
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if c.SigningKeys != "" {
		if _, err := signing.ParseKeys(c.SigningKeys); err != nil {
			return config.Invalid("CONCH_SIGNING_KEYS", "%v", err)
		}
	}
	if err := c.Executor.Validate(); err != nil {
		return err
	}
	if err := c.AuditConfig.Validate(); err != nil {
		return err
	}
	if c.KeyConfig.Given() {
		if err := c.KeyConfig.Validate(); err != nil {
			return err
		}
	}
	return router.ValidatePublicURL(c.PublicURL)
}

// RunDev runs the whole cluster in one process: embedded etcd, the four
// services each on its own loopback gRPC listener registered in etcd, and the
// router's HTTP server. It writes a ready banner to banner once the HTTP
// server listens.
func RunDev(ctx context.Context, cfg DevConfig, banner io.Writer) error {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("dev: data dir: %w", err)
	}
	// Before anything else: a second conch dev on this data dir is
	// refused at once (a *dirlock.HeldError), before it overwrites a file
	// the first one uses or waits on the locks of its etcd. The services
	// run in this process, so they share the lock.
	lock, err := dirlock.Acquire(cfg.DataDir, devLockHolder)
	if err != nil {
		return err
	}
	defer lock.Release()
	key, err := devAPIKey(cfg)
	if err != nil {
		return err
	}
	sealing, err := devSecretsKey(cfg)
	if err != nil {
		return err
	}
	lvl, _ := logging.ParseLevel(cfg.LogLevel)
	etcdTLS, client, err := devEtcdTLS(cfg.DataDir)
	if err != nil {
		return err
	}
	emb, err := etcdx.StartEmbedded(ctx, etcdx.EmbeddedOptions{Dir: filepath.Join(cfg.DataDir, "etcd"), Logger: logging.New(os.Stderr, lvl), TLS: etcdTLS, QuotaBytes: cfg.EtcdQuotaBytes})
	if err != nil {
		return fmt.Errorf("dev: start etcd: %w", err)
	}
	defer emb.Close()

	// The object stores are control plane too: no tenant's URL reaches
	// them, whatever the operator allows.
	ob := cfg.Config
	ob.OutboundDeny = append(slices.Clone(ob.OutboundDeny), hostPorts(cfg.S3Endpoint, cfg.AuditS3Endpoint)...)
	common := &Common{
		EtcdClientConfig: EtcdClientConfig{
			EtcdEndpoints: emb.Endpoints(), EtcdRequestTimeout: etcdx.DefaultRequestTimeout,
			EtcdCAFile: etcdTLS.CAFile, EtcdCertFile: client.CertFile, EtcdKeyFile: client.KeyFile,
		},
		LogLevel: cfg.LogLevel, InternalSecret: randomSecret(), ShutdownTimeout: 5 * time.Second, Config: ob, Ceilings: cfg.Ceilings, Quotas: cfg.Quotas,
	}
	p, err := newProcess(ctx, "conch-dev", common)
	if err != nil {
		return err
	}
	defer p.close(ctx)
	// For an operator's etcdctl, with the root certificate in <data-dir>/pki.
	p.log.Info("embedded etcd", "endpoints", emb.Endpoints())

	signingKeys, err := devSigningKeys(cfg)
	if err != nil {
		return err
	}
	ac := cfg.AuditConfig
	if ac.AuditDir == "" && ac.AuditS3Endpoint == "" {
		ac.AuditDir = filepath.Join(cfg.DataDir, "audit")
	}
	ready := make(chan string, 1)
	services := []struct {
		name  string
		build builder
	}{
		// The dev cluster's services share root's certificate: its router
		// maintains etcd's space with it.
		{"router", buildRouter(router.Config{
			HTTPAddr: cfg.HTTPAddr, PublicURL: cfg.PublicURL, AdminKey: key, AdminAccount: DevAccount, HTTPConfig: cfg.HTTPConfig,
			KeyConfig: sealing, ResponseStorage: router.ResponseStorage{ResponsesDir: filepath.Join(cfg.DataDir, "responses")},
		}, EtcdAdminConfig{}, ready, func(ctx context.Context, svc *router.Service) error {
			if err := svc.Gateways().Ensure(ctx, DevAccount, devGateway()); err != nil {
				return fmt.Errorf("dev: default gateway: %w", err)
			}
			// The gateway host is this machine: the dev account, its
			// admin, is the only one granted it.
			if _, err := svc.Accounts().SetGrants(ctx, DevAccount, []string{accounts.GrantGatewayHost}); err != nil {
				return fmt.Errorf("dev: grant the gateway host: %w", err)
			}
			return nil
		})},
		{"workspace", buildWorkspace(workspace.Config{
			Dir: filepath.Join(cfg.DataDir, "workspaces"), S3Endpoint: cfg.S3Endpoint, S3AccessKey: cfg.S3AccessKey, S3SecretKey: cfg.S3SecretKey,
			S3Bucket: cfg.S3Bucket, S3Secure: cfg.S3Secure, SigningKeys: signingKeys, QuotaBytes: cfg.QuotaBytes, QuotaFiles: cfg.QuotaFiles,
			TemplateConfig: cfg.TemplateConfig,
		})},
		{"executor", buildExecutor(devExecutor(cfg.Executor), ac.AuditFlush)},
		{"approval", buildApproval(approval.Config{AuditConfig: ac, KeyConfig: sealing})},
	}
	var built []*component
	defer func() {
		for i := len(built) - 1; i >= 0; i-- {
			built[i].close()
		}
	}()
	for _, s := range services {
		c, err := p.build(ctx, s.name, "127.0.0.1:0", "", s.build)
		if err != nil {
			return err
		}
		built = append(built, c)
	}
	// One process holds every key a dev cluster uses, so it re-seals at
	// start what `conch secrets rotate` would: secrets stored by an older
	// conch, or under a key that is no longer first.
	keys, err := sealing.Keyring()
	if err != nil {
		return err
	}
	err = reseal(ctx, p.etcd, keys, func(what string, pass seal.Pass) {
		if pass.Resealed > 0 {
			p.log.Info("stored secrets re-sealed", "records", what, "count", pass.Resealed, "key", keys.ActiveID())
		}
	})
	if err != nil {
		p.log.Warn("some stored secrets are not re-sealed", "error", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range built {
		p.start(gctx, g, c, common)
	}
	g.Go(func() error {
		select {
		case addr := <-ready:
			fmt.Fprintf(banner, "conch dev is up on http://%s\n  data dir: %s\n  API key:  %s (account %q, also in %s)\n  console:  http://%s/ (in a browser)\n  approvals: http://%s/ui/approvals\n",
				addr, cfg.DataDir, key, DevAccount, filepath.Join(cfg.DataDir, "api-key"), addr, addr)
		case <-gctx.Done():
		}
		return nil
	})
	return g.Wait()
}

// devEtcdTLS makes (or reuses) the certificates of the dev cluster's etcd
// in <data-dir>/pki, as `conch etcd-pki` makes them: a CA of its own,
// etcd's server certificate, and root's client certificate, which the
// cluster's services share (they run in one process). etcd then serves on
// loopback over TLS to holders of those certificates alone, with its auth
// on.
func devEtcdTLS(dataDir string) (*etcdx.ServerTLS, pki.Pair, error) {
	certs, err := MakeEtcdPKI(filepath.Join(dataDir, "pki"), nil)
	if err != nil {
		return nil, pki.Pair{}, fmt.Errorf("dev: %w", err)
	}
	server, client := certs.Pairs[EtcdMemberCert], certs.Pairs[EtcdRootCert]
	root, err := pki.ClientConfig(certs.CAFile, client)
	if err != nil {
		return nil, pki.Pair{}, fmt.Errorf("dev: %w", err)
	}
	return &etcdx.ServerTLS{CAFile: certs.CAFile, CertFile: server.CertFile, KeyFile: server.KeyFile, Root: root}, client, nil
}

// devExecutor is the executor of a dev cluster: the gateway host is on,
// for the accounts granted it (the dev account alone, unless its admin
// grants others).
func devExecutor(c executor.Config) executor.Config {
	c.GatewayHost = true
	return c
}

// devSecretsKey returns where conch dev's keyring is: the one configured,
// else <data-dir>/secrets-key, made with one random key on first start and
// kept (mode 0600), so that what dev stored stays readable.
func devSecretsKey(cfg DevConfig) (seal.KeyConfig, error) {
	if cfg.KeyConfig.Given() {
		return cfg.KeyConfig, nil
	}
	path := filepath.Join(cfg.DataDir, "secrets-key")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		k, err := seal.GenerateKey("dev")
		if err != nil {
			return seal.KeyConfig{}, err
		}
		text := "# The keys that seal the secrets conch dev stores in etcd (id:base64key,\n" +
			"# the first seals). Without this file they cannot be read.\n" + seal.FormatKey(k) + "\n"
		// O_EXCL: a key is never overwritten, whatever raced to make it.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return seal.KeyConfig{}, fmt.Errorf("dev: secrets key: %w", err)
		}
		_, err = f.WriteString(text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return seal.KeyConfig{}, fmt.Errorf("dev: secrets key: %w", err)
		}
	} else if err != nil {
		return seal.KeyConfig{}, fmt.Errorf("dev: secrets key: %w", err)
	}
	kc := seal.KeyConfig{SecretsKeyFile: path}
	if _, err := kc.Keyring(); err != nil {
		return seal.KeyConfig{}, err
	}
	return kc, nil
}

// devGateway is the gateway every dev cluster has: the built-in scripted
// model with the shell tool on.
func devGateway() *routerv1.Gateway {
	return &routerv1.Gateway{
		Name:     "default",
		Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_SCRIPTED},
		Shell:    &routerv1.ShellSettings{Enabled: true},
	}
}

// devAPIKey returns CONCH_API_KEY, else the key kept in the data dir, else a
// new random key, and writes it to <data-dir>/api-key for the CLI.
func devAPIKey(cfg DevConfig) (string, error) {
	path := filepath.Join(cfg.DataDir, "api-key")
	key := cfg.APIKey
	if key == "" {
		b, err := os.ReadFile(path)
		switch {
		case err == nil && len(strings.TrimSpace(string(b))) >= 16:
			return strings.TrimSpace(string(b)), nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("dev: read API key: %w", err)
		}
		key = "conch_dev_" + randomSecret()
	}
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("dev: write API key: %w", err)
	}
	return key, nil
}

func randomSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return base64.RawURLEncoding.EncodeToString(b)
}
