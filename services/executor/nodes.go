package executor

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/executor/nodes"
	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// The executor's registry of the paired nodes attached to it: one
// connection per (account, name) here, and in etcd, under its lease, which
// executor holds each.

func nodeKey(account, name string) string { return account + "/" + name }

// node returns account's node name if it is attached here; a node attached
// to another executor, or to none, is a clear error.
func (s *Service) node(ctx context.Context, account, name string) (*nodes.Conn, error) {
	if !placement.NodeName.MatchString(name) {
		return nil, errs.New(errs.NotFound, policy.ErrNodeNotFound)
	}
	s.mu.Lock()
	c := s.nodes[nodeKey(account, name)]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	rec, ok, err := placement.Lookup(ctx, s.etcd, placement.NodeKey(account, name))
	if err == nil && ok && rec.Executor != s.name {
		return nil, errs.New(errs.Unavailable, "node %s is connected to executor %s; retry to reach it", name, rec.Executor)
	}
	return nil, errs.New(errs.NotFound, policy.ErrNodeNotFound)
}

// recordNode writes c's placement record under the executor's lease. The
// newest connection of a name wins.
func (s *Service) recordNode(ctx context.Context, c *nodes.Conn, since time.Time) error {
	rec := placement.Record{Account: c.Account, Executor: s.name, Addr: s.addr, Platform: c.Platform, Created: since, Conn: c.ID}
	s.mu.Lock()
	lease := s.lease
	s.mu.Unlock()
	if _, err := s.etcd.Put(ctx, placement.NodeKey(c.Account, c.Name), rec.Encode(), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("executor: record node %s: %w", c.Name, err)
	}
	return nil
}

// forgetNode removes c's record unless a newer connection replaced it.
func (s *Service) forgetNode(ctx context.Context, c *nodes.Conn) {
	key := placement.NodeKey(c.Account, c.Name)
	rec, ok, err := placement.Lookup(ctx, s.etcd, key)
	if err != nil || !ok || rec.Conn != c.ID {
		return
	}
	_, _ = s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", rec.Encode())).Then(clientv3.OpDelete(key)).Commit()
}

// Attach serves a node's stream until it ends: it records the node, then
// passes the node's answers to the commands and resolves waiting for them.
func (s *Service) Attach(ctx context.Context, account string, stream executorv1.ExecutorService_AttachNodeServer) error {
	hello, err := placement.ReadHello(ctx, stream)
	if err != nil {
		return err
	}
	c, err := nodes.New(account, hello, stream)
	if err != nil {
		return err
	}
	since := time.Now().UTC()
	if err := s.recordNode(ctx, c, since); err != nil {
		return err
	}
	k := nodeKey(account, c.Name)
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		s.forgetNode(context.WithoutCancel(ctx), c)
		return s.shuttingDown()
	}
	old := s.nodes[k]
	s.nodes[k] = c
	s.mu.Unlock()
	if old != nil {
		old.Close(errs.New(errs.Conflict, "node %s connected again; this connection is replaced", c.Name))
	}
	s.log.Info("node attached", "node", c.Name, "account", account, "platform", c.Platform)
	defer func() {
		s.mu.Lock()
		if s.nodes[k] == c {
			delete(s.nodes, k)
		}
		s.mu.Unlock()
		c.Close(nil)
		s.forgetNode(context.WithoutCancel(ctx), c)
		s.log.Info("node detached", "node", c.Name, "account", account)
	}()
	return c.Serve(ctx)
}
