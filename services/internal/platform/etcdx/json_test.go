package etcdx_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

type record struct {
	Name  string   `json:"name"`
	Tools []string `json:"tools"`
}

func TestGetJSON(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	stored := record{Name: "a", Tools: []string{"x", "y"}}
	if err := etcdx.PutJSON(t.Context(), cli, "json/stored", stored); err != nil {
		t.Fatalf("PutJSON: %v", err)
	}
	resp, err := cli.Get(t.Context(), "json/stored")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get what PutJSON stored: %v, %v", resp, err)
	}
	storedRev := resp.Kvs[0].ModRevision
	put(t, cli, "json/garbled", "{not json")
	ended, cancel := context.WithCancel(t.Context())
	cancel()

	tests := []struct {
		name      string
		ctx       context.Context
		key       string
		want      record
		wantRev   int64
		wantFound bool
		wantKind  errs.Kind // checked when wantErr
		wantErr   bool
	}{
		{name: "stored", key: "json/stored", want: stored, wantRev: storedRev, wantFound: true},
		{name: "missing", key: "json/missing"},
		{name: "not a record", key: "json/garbled", wantErr: true, wantKind: errs.Internal},
		{name: "context ended", ctx: ended, key: "json/stored", wantErr: true, wantKind: errs.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			got, rev, found, err := etcdx.GetJSON[record](ctx, cli, tt.key)
			if tt.wantErr {
				if err == nil || errs.KindOf(err) != tt.wantKind {
					t.Fatalf("GetJSON() error = %v (kind %v), want kind %v", err, errs.KindOf(err), tt.wantKind)
				}
				return
			}
			if err != nil {
				t.Fatalf("GetJSON() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GetJSON() value (-want +got):\n%s", diff)
			}
			if rev != tt.wantRev || found != tt.wantFound {
				t.Errorf("GetJSON() rev, found = %d, %v; want %d, %v", rev, found, tt.wantRev, tt.wantFound)
			}
		})
	}
}
