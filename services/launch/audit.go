package launch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/workspace/store"
)

// AuditConfig says where the audit trail is kept and how it is written.
type AuditConfig struct {
	AuditDir         string        `flag:"audit-dir" env:"CONCH_AUDIT_DIR" usage:"local directory for the audit trail when CONCH_AUDIT_S3_ENDPOINT is not set (empty with no endpoint: no audit trail)"`
	AuditS3Endpoint  string        `env:"CONCH_AUDIT_S3_ENDPOINT" usage:"S3 endpoint for the audit trail: host:port, or an http:// or https:// URL"`
	AuditS3AccessKey string        `env:"CONCH_AUDIT_S3_ACCESS_KEY" usage:"S3 access key of the audit trail"`
	AuditS3SecretKey string        `env:"CONCH_AUDIT_S3_SECRET_KEY" usage:"S3 secret key of the audit trail"`
	AuditS3Bucket    string        `env:"CONCH_AUDIT_S3_BUCKET" default:"conch-audit" usage:"S3 bucket of the audit trail"`
	AuditS3Secure    bool          `env:"CONCH_AUDIT_S3_SECURE" usage:"use HTTPS to reach the audit trail's S3"`
	AuditFlush       time.Duration `flag:"audit-flush" env:"CONCH_AUDIT_FLUSH" default:"2s" usage:"how often audit records are written; a crash loses at most this window"`
	AuditBuffer      int           `flag:"audit-buffer" env:"CONCH_AUDIT_BUFFER" default:"10000" usage:"audit records held while the object store is slow or down; more are dropped, counted and logged"`
	AuditRetention   time.Duration `flag:"audit-retention" env:"CONCH_AUDIT_RETENTION" default:"2160h" usage:"how long audit segments are kept (default 90 days)"`
}

// Validate checks the audit settings.
func (c *AuditConfig) Validate() error {
	if c.AuditS3Endpoint != "" && (c.AuditS3AccessKey == "" || c.AuditS3SecretKey == "") {
		return config.Invalid("CONCH_AUDIT_S3_ACCESS_KEY", "CONCH_AUDIT_S3_ACCESS_KEY and CONCH_AUDIT_S3_SECRET_KEY are required with CONCH_AUDIT_S3_ENDPOINT")
	}
	if c.AuditFlush <= 0 {
		return config.Invalid("--audit-flush", "must be positive")
	}
	if c.AuditBuffer < 1 {
		return config.Invalid("--audit-buffer", "must be at least 1")
	}
	if c.AuditRetention < time.Hour {
		return config.Invalid("--audit-retention", "must be at least 1h")
	}
	return nil
}

// auditTrail is an open audit trail: its writer and its reader.
type auditTrail struct {
	store  store.Store
	writer *audit.Writer
	cfg    AuditConfig
	etcd   *clientv3.Client
	log    *slog.Logger
}

// newAudit opens the audit trail of c for the writer named name, or
// returns nil when c sets no storage.
func (p *process) newAudit(ctx context.Context, c AuditConfig, name string) (*auditTrail, error) {
	if c.AuditDir == "" && c.AuditS3Endpoint == "" {
		p.log.Warn("no audit trail: set CONCH_AUDIT_DIR or CONCH_AUDIT_S3_ENDPOINT")
		return nil, nil
	}
	st, err := openStore(ctx, objectStorage{dir: c.AuditDir, endpoint: c.AuditS3Endpoint, access: c.AuditS3AccessKey, secret: c.AuditS3SecretKey, bucket: c.AuditS3Bucket, secure: c.AuditS3Secure})
	if err != nil {
		return nil, fmt.Errorf("audit storage: %w", err)
	}
	w, err := audit.NewWriter(audit.Config{Store: st, Etcd: p.etcd, Name: name, FlushEvery: c.AuditFlush, MaxBuffered: c.AuditBuffer, Logger: p.log})
	if err != nil {
		return nil, err
	}
	return &auditTrail{store: st, writer: w, cfg: c, etcd: p.etcd, log: p.log}, nil
}

// run writes the trail and removes what is older than the retention.
func (t *auditTrail) run(ctx context.Context) error {
	if t == nil {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return t.writer.Run(gctx) })
	g.Go(func() error {
		tick := time.NewTicker(time.Hour)
		defer tick.Stop()
		for {
			n, err := audit.Sweep(gctx, t.store, t.etcd, audit.DefaultEtcdPrefix, time.Now().Add(-t.cfg.AuditRetention))
			if err != nil && gctx.Err() == nil {
				t.log.WarnContext(gctx, "audit retention sweep failed", "error", err)
			} else if n > 0 {
				t.log.InfoContext(gctx, "audit segments past retention removed", "segments", n)
			}
			select {
			case <-gctx.Done():
				return nil
			case <-tick.C:
			}
		}
	})
	return g.Wait()
}
