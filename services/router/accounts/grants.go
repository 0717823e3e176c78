package accounts

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/quotas"
)

// Grants are what an admin gives an account beyond a sandbox.
const (
	// GrantGatewayHost lets the account's commands run on an executor's
	// own machine (exec host gateway), where the operator turned that
	// host on: the operator's machine, not the tenant's.
	GrantGatewayHost = "gateway_host"
)

// knownGrants are the grants an admin may give.
var knownGrants = []string{GrantGatewayHost}

// SetGrants replaces an account's grants, and returns the account.
func (s *Store) SetGrants(ctx context.Context, id string, grants []string) (Account, error) {
	var clean []string
	for _, g := range grants {
		if !slices.Contains(knownGrants, g) {
			return Account{}, errs.New(errs.InvalidArgument, "grants: unknown grant %q (known: %v)", g, knownGrants)
		}
		if !slices.Contains(clean, g) {
			clean = append(clean, g)
		}
	}
	slices.Sort(clean)
	return s.update(ctx, id, func(a *Account) { a.Grants = clean })
}

// update changes account id with edit, in a transaction that holds while
// no one else changed it.
func (s *Store) update(ctx context.Context, id string, edit func(*Account)) (Account, error) {
	if err := validAccountID(id); err != nil {
		return Account{}, errs.New(errs.NotFound, "account %q not found", id)
	}
	key := accountsPrefix + id
	for {
		a, rev, found, err := etcdx.GetJSON[Account](ctx, s.cli, key)
		if err != nil {
			return Account{}, fmt.Errorf("accounts: get %s: %w", id, err)
		}
		if !found {
			return Account{}, errs.New(errs.NotFound, "account %q not found", id)
		}
		edit(&a)
		b, err := json.Marshal(a)
		if err != nil {
			return Account{}, err
		}
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return Account{}, fmt.Errorf("accounts: update %s: %w", id, err)
		}
		if resp.Succeeded {
			return a, nil
		}
	}
}

// HasGrant reports whether account holds grant, read from etcd now: the
// executor asks it before each command on the gateway host, so that a
// revoked grant holds from the next command on.
func HasGrant(ctx context.Context, kv clientv3.KV, account, grant string) (bool, error) {
	if validAccountID(account) != nil {
		return false, nil
	}
	a, _, found, err := etcdx.GetJSON[Account](ctx, kv, accountsPrefix+account)
	if err != nil {
		return false, fmt.Errorf("accounts: get %s: %w", account, err)
	}
	return found && slices.Contains(a.Grants, grant), nil
}

// HasGrant reports whether account holds grant.
func (s *Store) HasGrant(ctx context.Context, account, grant string) (bool, error) {
	return HasGrant(ctx, s.cli, account, grant)
}

// ErrNotGranted is the refusal of a grant the account lacks, naming it
// and how an admin gives it.
func ErrNotGranted(account, grant string) error {
	return errs.New(errs.PermissionDenied, "account %s has no grant %q: an admin grants it per account (PATCH /api/v1/accounts/%s {\"grants\": [%q]})", account, grant, account, grant)
}

// SetQuotas replaces the quotas an admin gave an account over the
// operator's defaults (quota name → limit; an empty map returns it to the
// defaults), and returns the account.
func (s *Store) SetQuotas(ctx context.Context, id string, overrides map[string]int64) (Account, error) {
	if err := quotas.CheckOverrides(overrides); err != nil {
		return Account{}, err
	}
	return s.update(ctx, id, func(a *Account) {
		a.Quotas = nil
		if len(overrides) > 0 {
			a.Quotas = maps.Clone(overrides)
		}
	})
}

// Limits returns an account's quotas: the operator's defaults in cfg with
// the overrides an admin gave it, read from etcd now.
func Limits(ctx context.Context, kv clientv3.KV, cfg *quotas.Config, account string) (quotas.Limits, error) {
	if validAccountID(account) != nil {
		return cfg.Limits(), nil
	}
	a, _, _, err := etcdx.GetJSON[Account](ctx, kv, accountsPrefix+account)
	if err != nil {
		return nil, fmt.Errorf("accounts: get %s: %w", account, err)
	}
	return cfg.With(a.Quotas), nil
}
