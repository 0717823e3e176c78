package launch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/store"
)

// auditTrail is an open audit trail: its writer and its reader.
type auditTrail struct {
	store  store.Store
	writer *audit.Writer
	cfg    approval.AuditConfig
	etcd   *clientv3.Client
	log    *slog.Logger
}

// newAudit opens the audit trail of c for the writer named name, or
// returns nil when c sets no storage.
func (p *process) newAudit(ctx context.Context, c approval.AuditConfig, name string) (*auditTrail, error) {
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
