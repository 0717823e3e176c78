package accounts

import (
	"slices"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

func TestGrants(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	s, err := New(ctx, cli, "admin-key-0123456789", "dev")
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.CreateAccount(ctx, "Tenant")
	if err != nil {
		t.Fatal(err)
	}
	has := func(account string) bool {
		t.Helper()
		ok, err := HasGrant(ctx, cli, account, GrantGatewayHost)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if has(a.ID) || has("dev") {
		t.Fatal("an account holds a grant no admin gave")
	}
	cases := []struct {
		name   string
		grants []string
		want   []string
		err    string
	}{
		{"grant", []string{GrantGatewayHost}, []string{GrantGatewayHost}, ""},
		{"twice is once", []string{GrantGatewayHost, GrantGatewayHost}, []string{GrantGatewayHost}, ""},
		{"unknown", []string{"root"}, []string{GrantGatewayHost}, `unknown grant "root"`},
		{"revoke", nil, nil, ""},
	}
	for _, tc := range cases {
		got, err := s.SetGrants(ctx, a.ID, tc.grants)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
			}
		} else if err != nil || !slices.Equal(got.Grants, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, got.Grants, err, tc.want)
		}
		if stored, _ := s.GetAccount(ctx, a.ID); !slices.Equal(stored.Grants, tc.want) || has(a.ID) != (len(tc.want) > 0) {
			t.Errorf("%s: stored %v, want %v", tc.name, stored.Grants, tc.want)
		}
	}
	if _, err := s.SetGrants(ctx, "acct-none", []string{GrantGatewayHost}); err == nil {
		t.Error("granted an account that does not exist")
	}
	if has("../dev") || has("") {
		t.Error("a malformed account id holds a grant")
	}
}
