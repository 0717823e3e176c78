package router

import (
	"context"
	"log/slog"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/router/accounts"
	"github.com/conch-sh/conch/services/router/mcpserver"
)

// mcpClaims counts the MCP sessions this router holds against their
// accounts' quota. The claims are on a lease this router keeps alive, so
// that they end with it as its sessions do.
type mcpClaims struct {
	ctx      context.Context
	etcd     *clientv3.Client
	accounts *accounts.Store
	log      *slog.Logger

	mu      sync.Mutex
	session *concurrency.Session // nil until the first claim, or once expired
}

var _ mcpserver.Claims = (*mcpClaims)(nil)

// lease returns this router's lease, taking a new one when the last ended
// (etcd was away for longer than its TTL).
func (c *mcpClaims) lease() (clientv3.LeaseID, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session != nil {
		select {
		case <-c.session.Done():
			c.session = nil
		default:
			return c.session.Lease(), nil
		}
	}
	s, err := concurrency.NewSession(c.etcd, concurrency.WithTTL(30), concurrency.WithContext(c.ctx))
	if err != nil {
		return 0, err
	}
	c.session = s
	return s.Lease(), nil
}

func (c *mcpClaims) Claim(ctx context.Context, account, id string) error {
	limits, err := c.accounts.Limits(ctx, account)
	if err != nil {
		return err
	}
	lease, err := c.lease()
	if err != nil {
		return err
	}
	return quotas.Claim(ctx, c.etcd, quotas.MCPSessions, account, id, quotas.Usage{quotas.MCPSessions: 1}, limits, []clientv3.OpOption{clientv3.WithLease(lease)})
}

func (c *mcpClaims) Release(ctx context.Context, account, id string) {
	if err := quotas.Release(ctx, c.etcd, quotas.MCPSessions, account, id); err != nil {
		c.log.WarnContext(ctx, "MCP session claim not released; it ends with this router's lease", "account", account, "error", err)
	}
}
