package router

import (
	"context"
	"fmt"
	"maps"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/router/accounts"
	"github.com/conch-sh/conch/services/router/gateways"
	"github.com/conch-sh/conch/services/router/skills"
)

// accountServer serves AccountService: thin handlers over accounts.Store,
// each of which needs the admin key but GetQuotas.
type accountServer struct {
	routerv1.UnsafeAccountServiceServer
	store *accounts.Store
	etcd  *clientv3.Client // reads what accounts hold, for GetQuotas
}

var _ routerv1.AccountServiceServer = (*accountServer)(nil)

func (s *accountServer) CreateAccount(ctx context.Context, req *routerv1.CreateAccountRequest) (*routerv1.CreateAccountResponse, error) {
	if err := tenant.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	a, err := s.store.CreateAccount(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	return &routerv1.CreateAccountResponse{Account: accountProto(a)}, nil
}

func (s *accountServer) ListAccounts(ctx context.Context, _ *routerv1.ListAccountsRequest) (*routerv1.ListAccountsResponse, error) {
	if err := tenant.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	list, err := s.store.ListAccounts(ctx)
	if err != nil {
		return nil, err
	}
	resp := &routerv1.ListAccountsResponse{Accounts: make([]*routerv1.Account, len(list))}
	for i, a := range list {
		resp.Accounts[i] = accountProto(a)
	}
	return resp, nil
}

func (s *accountServer) UpdateAccount(ctx context.Context, req *routerv1.UpdateAccountRequest) (*routerv1.UpdateAccountResponse, error) {
	if err := tenant.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	a, err := s.store.SetGrants(ctx, req.GetId(), req.GetGrants())
	if err != nil {
		return nil, err
	}
	return &routerv1.UpdateAccountResponse{Account: accountProto(a)}, nil
}

func (s *accountServer) CreateAPIKey(ctx context.Context, req *routerv1.CreateAPIKeyRequest) (*routerv1.CreateAPIKeyResponse, error) {
	if err := tenant.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	secret, k, err := s.store.CreateKey(ctx, req.GetAccountId())
	if err != nil {
		return nil, err
	}
	return &routerv1.CreateAPIKeyResponse{Key: secret, KeyId: k.ID}, nil
}

func (s *accountServer) ListAPIKeys(ctx context.Context, req *routerv1.ListAPIKeysRequest) (*routerv1.ListAPIKeysResponse, error) {
	if err := tenant.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	keys, err := s.store.ListKeys(ctx, req.GetAccountId())
	if err != nil {
		return nil, err
	}
	resp := &routerv1.ListAPIKeysResponse{Keys: make([]*routerv1.APIKey, len(keys))}
	for i, k := range keys {
		resp.Keys[i] = &routerv1.APIKey{Id: k.ID, AccountId: k.AccountID, CreatedAt: timestamppb.New(k.CreatedAt)}
	}
	return resp, nil
}

func (s *accountServer) DeleteAPIKey(ctx context.Context, req *routerv1.DeleteAPIKeyRequest) (*routerv1.DeleteAPIKeyResponse, error) {
	if err := tenant.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	if err := s.store.DeleteKey(ctx, req.GetAccountId(), req.GetKeyId()); err != nil {
		return nil, err
	}
	return &routerv1.DeleteAPIKeyResponse{}, nil
}

func accountProto(a accounts.Account) *routerv1.Account {
	return &routerv1.Account{Id: a.ID, Name: a.Name, CreatedAt: timestamppb.New(a.CreatedAt), Grants: a.Grants, Quotas: a.Quotas}
}

func (s *accountServer) SetAccountQuotas(ctx context.Context, req *routerv1.SetAccountQuotasRequest) (*routerv1.SetAccountQuotasResponse, error) {
	if err := tenant.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	a, err := s.store.SetQuotas(ctx, req.GetId(), req.GetQuotas())
	if err != nil {
		return nil, err
	}
	return &routerv1.SetAccountQuotasResponse{Account: accountProto(a)}, nil
}

// GetQuotas answers the caller's quotas, or, for the admin, those of the
// account it names.
func (s *accountServer) GetQuotas(ctx context.Context, req *routerv1.GetQuotasRequest) (*routerv1.GetQuotasResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if id := req.GetAccountId(); id != "" && id != account {
		if err := tenant.RequireAdmin(ctx); err != nil {
			return nil, err
		}
		if _, err := s.store.GetAccount(ctx, id); err != nil {
			return nil, err
		}
		account = id
	}
	limits, err := s.store.Limits(ctx, account)
	if err != nil {
		return nil, err
	}
	used, err := usage(ctx, s.etcd, account)
	if err != nil {
		return nil, err
	}
	resp := &routerv1.GetQuotasResponse{AccountId: account}
	for _, k := range quotas.Kinds {
		resp.Quotas = append(resp.Quotas, &routerv1.Quota{Name: string(k), Limit: limits[k], Used: used[k]})
	}
	return resp, nil
}

// usage is how much of each quota account holds: its claims, and the
// gateways and keys it has.
func usage(ctx context.Context, kv clientv3.KV, account string) (quotas.Usage, error) {
	used := quotas.Usage{}
	for _, kind := range []quotas.Kind{quotas.Sandboxes, quotas.StoredResponses, quotas.PendingApprovals, quotas.MCPSessions, quotas.Snapshots} {
		u, _, err := quotas.Read(ctx, kv, kind, account)
		if err != nil {
			return nil, err
		}
		maps.Copy(used, u)
	}
	egress, _, err := quotas.ReadEgress(ctx, kv, account, quotas.Day(time.Now()), "")
	if err != nil {
		return nil, err
	}
	used[quotas.EgressBytesPerDay] = egress
	for kind, prefix := range map[quotas.Kind]string{quotas.Gateways: gateways.AccountPrefix(account), quotas.APIKeys: accounts.KeysPrefix(account),
		quotas.Skills: skills.AccountPrefix(account)} {
		resp, err := kv.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, fmt.Errorf("router: count %s: %w", kind, err)
		}
		used[kind] = resp.Count
	}
	return used, nil
}
