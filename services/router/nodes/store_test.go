package nodes

import (
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

func TestStore(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	s := New(cli)
	ctx := t.Context()

	n, token, err := s.Create(ctx, "acme", "laptop")
	if err != nil || n.Name != "laptop" || !strings.HasPrefix(token, TokenPrefix) {
		t.Fatalf("Create = %+v %q %v", n, token, err)
	}
	for _, tc := range []struct {
		account, name string
		kind          errs.Kind
	}{
		{"acme", "laptop", errs.AlreadyExists},
		{"acme", "", errs.InvalidArgument},
		{"acme", "../laptop", errs.InvalidArgument},
		{"acme", "a/b", errs.InvalidArgument},
		{"acme", "-flag", errs.InvalidArgument},
		{"acme", strings.Repeat("x", 65), errs.InvalidArgument},
	} {
		if _, _, err := s.Create(ctx, tc.account, tc.name); errs.KindOf(err) != tc.kind {
			t.Errorf("Create(%q, %q) = %v, want %v", tc.account, tc.name, err, tc.kind)
		}
	}
	// The same name in another account is another node.
	_, other, err := s.Create(ctx, "globex", "laptop")
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		token, account, name string
		ok                   bool
	}{
		{token, "acme", "laptop", true},
		{other, "globex", "laptop", true},
		{token + "x", "", "", false},
		{strings.TrimPrefix(token, TokenPrefix), "", "", false},
		{"", "", "", false},
	} {
		a, n, err := s.Authenticate(ctx, tc.token)
		if ok := err == nil; ok != tc.ok || a != tc.account || n != tc.name {
			t.Errorf("Authenticate(%.20q) = %q %q %v, want %q %q ok=%v", tc.token, a, n, err, tc.account, tc.name, tc.ok)
		}
		if err != nil && errs.KindOf(err) != errs.Unauthenticated {
			t.Errorf("Authenticate(%.20q) error kind %v", tc.token, errs.KindOf(err))
		}
	}

	// A connection record from an executor shows in the list.
	rec := placement.Record{Account: "acme", Executor: "x1", Addr: "127.0.0.1:1", Platform: "linux/amd64", Created: time.Now().UTC()}
	if _, err := cli.Put(ctx, placement.NodeKey("acme", "laptop"), rec.Encode()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, "acme", "desktop"); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, "acme")
	if err != nil || len(list) != 2 || list[0].Name != "desktop" || list[0].Connected || list[1].Name != "laptop" || !list[1].Connected || list[1].Executor != "x1" || list[1].Platform != "linux/amd64" {
		t.Fatalf("List = %+v %v", list, err)
	}
	if list, _ := s.List(ctx, "globex"); len(list) != 1 || list[0].Connected {
		t.Fatalf("globex's list = %+v", list)
	}

	unpaired := s.Unpaired(ctx, "acme", "laptop")
	select {
	case <-unpaired:
		t.Fatal("Unpaired closed before the node was deleted")
	case <-time.After(100 * time.Millisecond):
	}
	if err := s.Delete(ctx, "acme", "laptop"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-unpaired:
	case <-time.After(10 * time.Second):
		t.Fatal("Unpaired did not close on delete")
	}
	if _, _, err := s.Authenticate(ctx, token); errs.KindOf(err) != errs.Unauthenticated {
		t.Fatalf("token of a deleted node: %v", err)
	}
	if err := s.Delete(ctx, "acme", "laptop"); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("second delete: %v", err)
	}
	// Paired again under the same name, the old token stays dead.
	if _, _, err := s.Create(ctx, "acme", "laptop"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Authenticate(ctx, token); errs.KindOf(err) != errs.Unauthenticated {
		t.Fatalf("old token after pairing again: %v", err)
	}
}
