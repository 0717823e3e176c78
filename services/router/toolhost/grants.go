package toolhost

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
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
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	lease, err := s.cli.Grant(ctx, int64(ttl/time.Second)+1)
	if err != nil {
		return fmt.Errorf("toolhost: grant lease: %w", err)
	}
	if _, err := s.cli.Put(ctx, grantsPrefix+sandboxID, string(b), clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("toolhost: put grant: %w", err)
	}
	return nil
}

// Get returns the grant of a sandbox of account; another account's grant
// is not found.
func (s *Grants) Get(ctx context.Context, account, sandboxID string) (Grant, error) {
	var g Grant
	resp, err := s.cli.Get(ctx, grantsPrefix+sandboxID)
	if err != nil {
		return g, fmt.Errorf("toolhost: get grant: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return g, errs.New(errs.NotFound, "sandbox %q has no tools", sandboxID)
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &g); err != nil {
		return g, fmt.Errorf("toolhost: decode grant: %w", err)
	}
	if g.Account != account {
		return Grant{}, errs.New(errs.NotFound, "sandbox %q has no tools", sandboxID)
	}
	return g, nil
}

// Delete removes a sandbox's grant.
func (s *Grants) Delete(ctx context.Context, sandboxID string) error {
	_, err := s.cli.Delete(ctx, grantsPrefix+sandboxID)
	return err
}
