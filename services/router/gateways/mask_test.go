package gateways

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
)

func TestUpdatePaths(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		mask        *fieldmaskpb.FieldMask
		wantPaths   []string
		wantReplace bool
		wantErr     string // a part of the message; "" means no error
	}{
		{"no mask replaces", nil, nil, true, ""},
		{"star replaces", &fieldmaskpb.FieldMask{Paths: []string{"*"}}, nil, true, ""},
		{"empty mask changes nothing", &fieldmaskpb.FieldMask{}, nil, false, ""},
		{"leaf", &fieldmaskpb.FieldMask{Paths: []string{"shell.enabled"}}, []string{"shell.enabled"}, false, ""},
		{"whole message", &fieldmaskpb.FieldMask{Paths: []string{"upstream"}}, []string{"upstream"}, false, ""},
		{"camelCase", &fieldmaskpb.FieldMask{Paths: []string{"shell.timeoutSeconds", "maxIterations"}}, []string{"shell.timeout_seconds", "max_iterations"}, false, ""},
		{"list ends the path", &fieldmaskpb.FieldMask{Paths: []string{"tools.webhooks"}}, []string{"tools.webhooks"}, false, ""},
		{"star with others", &fieldmaskpb.FieldMask{Paths: []string{"*", "name"}}, nil, false, `update_mask: "*"`},
		{"unknown top field", &fieldmaskpb.FieldMask{Paths: []string{"shell", "bogus"}}, nil, false, `update_mask: "bogus" is not a field path: a gateway has no field "bogus"`},
		{"unknown nested field", &fieldmaskpb.FieldMask{Paths: []string{"shell.bogus"}}, nil, false, `update_mask: "shell.bogus" is not a field path: shell has no field "bogus"`},
		{"into a list", &fieldmaskpb.FieldMask{Paths: []string{"tools.webhooks.name"}}, nil, false, `"tools.webhooks.name" goes into tools.webhooks`},
		{"into a scalar", &fieldmaskpb.FieldMask{Paths: []string{"shell.enabled.x"}}, nil, false, `"shell.enabled.x" goes into shell.enabled`},
		{"empty path", &fieldmaskpb.FieldMask{Paths: []string{""}}, nil, false, `update_mask: ""`},
		{"trailing dot", &fieldmaskpb.FieldMask{Paths: []string{"shell."}}, nil, false, `update_mask: "shell."`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			paths, replace, err := updatePaths(tt.mask)
			if tt.wantErr != "" {
				if errs.KindOf(err) != errs.InvalidArgument || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("updatePaths = %v, want InvalidArgument containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if replace != tt.wantReplace || !cmp.Equal(paths, tt.wantPaths) {
				t.Errorf("updatePaths = %q, replace %v; want %q, replace %v", paths, replace, tt.wantPaths, tt.wantReplace)
			}
		})
	}
}

func TestMerged(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		patch *routerv1.Gateway
		paths []string
		want  func(*routerv1.Gateway)
	}{
		{"one leaf", &routerv1.Gateway{Shell: &routerv1.ShellSettings{Enabled: false, TimeoutSeconds: 99}}, []string{"shell.enabled"},
			func(g *routerv1.Gateway) { g.Shell.Enabled = false }},
		{"leaf under an unset message", &routerv1.Gateway{Shell: &routerv1.ShellSettings{Limits: &executorv1.Limits{Pids: 64}}}, []string{"shell.limits.pids"},
			func(g *routerv1.Gateway) { g.Shell.Limits = &executorv1.Limits{Pids: 64} }},
		{"masked but unset clears", &routerv1.Gateway{}, []string{"shell.timeout_seconds"},
			func(g *routerv1.Gateway) { g.Shell.TimeoutSeconds = 0 }},
		{"masked message unset in the patch clears it", &routerv1.Gateway{}, []string{"tools"},
			func(g *routerv1.Gateway) { g.Tools = nil }},
		{"a message is replaced whole", &routerv1.Gateway{Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_SCRIPTED}}, []string{"upstream"},
			func(g *routerv1.Gateway) {
				g.Upstream = &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_SCRIPTED}
			}},
		{"a list is replaced whole", &routerv1.Gateway{Skills: []*routerv1.Skill{{Name: "deploy", Content: "x"}}}, []string{"skills"},
			func(g *routerv1.Gateway) { g.Skills = []*routerv1.Skill{{Name: "deploy", Content: "x"}} }},
		{"optional field keeps its presence", &routerv1.Gateway{Shell: &routerv1.ShellSettings{AllowRequest: proto.Bool(false)}}, []string{"shell.allow_request"},
			func(g *routerv1.Gateway) { g.Shell.AllowRequest = proto.Bool(false) }},
		{"fields outside the mask are ignored", &routerv1.Gateway{MaxIterations: 5, Shell: &routerv1.ShellSettings{TimeoutSeconds: 7}}, []string{"max_iterations"},
			func(g *routerv1.Gateway) { g.MaxIterations = 5 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			old := valid()
			patch := proto.Clone(tt.patch)
			got := merged(old, tt.patch, tt.paths)
			want := valid()
			tt.want(want)
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("merged (-want +got):\n%s", diff)
			}
			if !proto.Equal(old, valid()) || !proto.Equal(patch, tt.patch) {
				t.Error("merged changed its arguments")
			}
		})
	}
}

// An update with a mask changes only the masked fields of the stored
// gateway, keeps its secrets, and is validated as a whole.
func TestStoreUpdateWithMask(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, etcdxtest.StartForTest(t), sealtest.Keyring(t))
	created, err := s.Create(ctx, "acme", valid())
	if err != nil {
		t.Fatal(err)
	}
	mask := func(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }
	stored := func() *routerv1.Gateway {
		t.Helper()
		g, _, err := s.get(ctx, "acme", "prod")
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	ignoreTimes := protocmp.IgnoreFields(&routerv1.Gateway{}, "updated_at")

	// The patch carries no secrets, as a client that read the gateway
	// back would send it: the stored ones stay.
	got, err := s.Update(ctx, "acme", "prod", &routerv1.Gateway{Shell: &routerv1.ShellSettings{Enabled: false}}, mask("shell.enabled"))
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(created).(*routerv1.Gateway)
	want.Shell.Enabled = false
	if diff := cmp.Diff(want, got, protocmp.Transform(), ignoreTimes); diff != "" {
		t.Errorf("patch of shell.enabled (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, stored(), protocmp.Transform(), ignoreTimes); diff != "" {
		t.Errorf("stored after patch (-want +got):\n%s", diff)
	}

	// Replacing the upstream whole without its key keeps the key.
	got, err = s.Update(ctx, "acme", "prod", &routerv1.Gateway{Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_OPENAI, Model: "gpt-5"}}, mask("upstream"))
	if err != nil {
		t.Fatal(err)
	}
	if u := got.GetUpstream(); u.GetApiKey() != "sk-secret" || u.GetModel() != "gpt-5" || u.GetBaseUrl() != "" {
		t.Errorf("upstream after patch = %v, want the new model, no base URL, the stored key", u)
	}

	before := stored()
	tests := []struct {
		name     string
		patch    *routerv1.Gateway
		mask     *fieldmaskpb.FieldMask
		wantKind errs.Kind
		wantMsg  string
	}{
		{"invalid value", &routerv1.Gateway{Shell: &routerv1.ShellSettings{TimeoutSeconds: 301}}, mask("shell.timeout_seconds"), errs.InvalidArgument, "shell.timeout_seconds:"},
		{"invalid result", &routerv1.Gateway{}, mask("upstream"), errs.InvalidArgument, "upstream: is required"},
		{"invalid combination", &routerv1.Gateway{Shell: &routerv1.ShellSettings{Network: &executorv1.Network{AllowedDomains: []string{"example.com"}}}}, mask("shell.network.allowed_domains"), errs.InvalidArgument, "shell.network.allowed_domains:"},
		{"unknown path", &routerv1.Gateway{}, mask("shell.bogus"), errs.InvalidArgument, `"shell.bogus"`},
		{"rename", &routerv1.Gateway{Name: "other"}, mask("name"), errs.InvalidArgument, "name:"},
		{"missing gateway", &routerv1.Gateway{Name: "nope"}, mask("max_iterations"), errs.NotFound, "not found"},
	}
	for _, tt := range tests {
		name := "prod"
		if tt.patch.GetName() == "nope" {
			name = "nope"
		}
		_, err := s.Update(ctx, "acme", name, tt.patch, tt.mask)
		if errs.KindOf(err) != tt.wantKind || !strings.Contains(err.Error(), tt.wantMsg) {
			t.Errorf("%s: Update = %v, want %v containing %q", tt.name, err, tt.wantKind, tt.wantMsg)
		}
	}
	// Refusals and an empty mask leave the stored gateway as it was, its
	// update time included.
	if _, err := s.Update(ctx, "acme", "prod", &routerv1.Gateway{MaxIterations: 3}, mask()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, stored(), protocmp.Transform()); diff != "" {
		t.Errorf("refused or empty updates changed the gateway (-want +got):\n%s", diff)
	}
}
