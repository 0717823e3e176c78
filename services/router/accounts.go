package router

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/accounts"
)

// accountServer serves AccountService: thin handlers over accounts.Store,
// each of which needs the admin key.
type accountServer struct {
	routerv1.UnsafeAccountServiceServer
	store *accounts.Store
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
	return &routerv1.Account{Id: a.ID, Name: a.Name, CreatedAt: timestamppb.New(a.CreatedAt), Grants: a.Grants}
}
