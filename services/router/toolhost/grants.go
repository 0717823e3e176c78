package toolhost

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
)

const grantsPrefix = "conch/toolgrants/" // <sandbox id> → Grant

// Grant lets a sandbox call the tools moved into it, on behalf of the
// completion that created it.
type Grant struct {
	Account string   `json:"account"`
	Gateway string   `json:"gateway"`
	Tools   []string `json:"tools"`
}

// Grants keeps tool grants in etcd, so any router can serve a sandbox's
// tool calls.
type Grants struct {
	cli *clientv3.Client
}

// NewGrants returns the grant store.
func NewGrants(cli *clientv3.Client) *Grants { return &Grants{cli: cli} }

// Put records g for a sandbox until ttl passes or Delete.
func (s *Grants) Put(ctx context.Context, sandboxID string, g Grant, ttl time.Duration) error {
	lease, err := s.cli.Grant(ctx, int64(ttl/time.Second)+1)
	if err != nil {
		return fmt.Errorf("toolhost: grant lease: %w", err)
	}
	if err := etcdx.PutJSON(ctx, s.cli, grantsPrefix+sandboxID, g, clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("toolhost: put grant: %w", err)
	}
	return nil
}

// Get returns the grant of a sandbox of account; another account's grant
// is not found.
func (s *Grants) Get(ctx context.Context, account, sandboxID string) (Grant, error) {
	g, _, found, err := etcdx.GetJSON[Grant](ctx, s.cli, grantsPrefix+sandboxID)
	if err != nil {
		return Grant{}, fmt.Errorf("toolhost: get grant: %w", err)
	}
	if !found || g.Account != account {
		return Grant{}, errs.New(errs.NotFound, "sandbox %q has no tools", sandboxID)
	}
	return g, nil
}

// Delete removes a sandbox's grant.
func (s *Grants) Delete(ctx context.Context, sandboxID string) error {
	_, err := s.cli.Delete(ctx, grantsPrefix+sandboxID)
	return err
}
