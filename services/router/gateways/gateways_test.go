package gateways

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/ceiling"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
)

func valid() *routerv1.Gateway {
	return &routerv1.Gateway{
		Name:     "prod",
		Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_OPENAI, Model: "gpt-4.1", BaseUrl: "http://127.0.0.1:11434/v1", ApiKey: "sk-secret"},
		Shell:    &routerv1.ShellSettings{Enabled: true, TimeoutSeconds: 30},
		Tools: &routerv1.ServerTools{Webhooks: []*routerv1.WebhookTool{{
			Name: "get_users", Url: "https://hooks.example/users", Headers: map[string]string{"Authorization": "Bearer hook-secret"},
			ParametersSchema: `{"type":"object","properties":{"filter":{"type":"string"}}}`,
		}}},
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		mutate    func(*routerv1.Gateway)
		wantField string // "" means valid
	}{
		{"valid", func(*routerv1.Gateway) {}, ""},
		{"scripted needs no model", func(g *routerv1.Gateway) {
			g.Upstream = &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_SCRIPTED}
		}, ""},
		{"empty name", func(g *routerv1.Gateway) { g.Name = "" }, "name"},
		{"name with slash", func(g *routerv1.Gateway) { g.Name = "a/b" }, "name"},
		{"name traversal", func(g *routerv1.Gateway) { g.Name = ".." }, "name"},
		{"uppercase name", func(g *routerv1.Gateway) { g.Name = "Prod" }, "name"},
		{"no upstream", func(g *routerv1.Gateway) { g.Upstream = nil }, "upstream"},
		{"no provider", func(g *routerv1.Gateway) { g.Upstream.Provider = 0 }, "upstream.provider"},
		{"unknown provider", func(g *routerv1.Gateway) { g.Upstream.Provider = 99 }, "upstream.provider"},
		{"openai without model", func(g *routerv1.Gateway) { g.Upstream.Model = " " }, "upstream.model"},
		{"bad base url", func(g *routerv1.Gateway) { g.Upstream.BaseUrl = "ftp://x" }, "upstream.base_url"},
		{"base url with credentials", func(g *routerv1.Gateway) { g.Upstream.BaseUrl = "http://u:p@x/v1" }, "upstream.base_url"},
		{"shell timeout too long", func(g *routerv1.Gateway) { g.Shell.TimeoutSeconds = 301 }, "shell.timeout_seconds"},
		{"negative output length", func(g *routerv1.Gateway) { g.Shell.MaxOutputLength = -1 }, "shell.max_output_length"},
		{"a template of no template's name", func(g *routerv1.Gateway) { g.Shell.Template = "../root" }, "shell.template"},
		{"tiny memory", func(g *routerv1.Gateway) { g.Shell.Limits = &executorv1.Limits{MemoryBytes: 1024} }, "shell.limits.memory_bytes"},
		{"skills", func(g *routerv1.Gateway) {
			g.Shell.Skills = []*routerv1.SkillMount{{SkillId: "skill_0a1b"}, {SkillId: "skill_2c", Version: "latest"}, {SkillId: "skill_3d", Version: "12"}}
		}, ""},
		{"a skill id of another kind", func(g *routerv1.Gateway) { g.Shell.Skills = []*routerv1.SkillMount{{SkillId: "../x"}} }, "shell.skills[0].skill_id"},
		{"a skill version that is no number", func(g *routerv1.Gateway) {
			g.Shell.Skills = []*routerv1.SkillMount{{SkillId: "skill_a", Version: "v1"}}
		}, "shell.skills[0].version"},
		{"a skill twice", func(g *routerv1.Gateway) {
			g.Shell.Skills = []*routerv1.SkillMount{{SkillId: "skill_a"}, {SkillId: "skill_a", Version: "2"}}
		}, "shell.skills[1].skill_id"},
		{"too many skills", func(g *routerv1.Gateway) {
			for i := range 9 {
				g.Shell.Skills = append(g.Shell.Skills, &routerv1.SkillMount{SkillId: fmt.Sprintf("skill_%d", i)})
			}
		}, "shell.skills"},
		{"domains without allowlist", func(g *routerv1.Gateway) {
			g.Shell.Network = &executorv1.Network{AllowedDomains: []string{"example.com"}}
		}, "shell.network.allowed_domains"},
		{"bad domain", func(g *routerv1.Gateway) {
			g.Shell.Network = &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"a b.example"}}
		}, "shell.network.allowed_domains[0]"},
		{"a whole top-level domain", func(g *routerv1.Gateway) {
			g.Shell.Network = &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"pypi.org", "*.org"}}
		}, "shell.network.allowed_domains[1]"},
		{"bad port", func(g *routerv1.Gateway) {
			g.Shell.Network = &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"pypi.org"}, Ports: []int32{0}}
		}, "shell.network.ports[0]"},
		{"ask without allowlist", func(g *routerv1.Gateway) {
			g.Shell.Network = &executorv1.Network{Ask: executorv1.NetworkAsk_NETWORK_ASK_ON_MISS}
		}, "shell.network.ask"},
		{"negative byte limit", func(g *routerv1.Gateway) {
			g.Shell.Network = &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"pypi.org"}, MaxBytes: -1}
		}, "shell.network.max_bytes"},
		{"a secret for a domain outside the list", func(g *routerv1.Gateway) {
			g.Shell.Network = &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"api.github.com"},
				Secrets: []*executorv1.NetworkSecret{{Env: "GH_TOKEN", Value: "x", Domains: []string{"github.com"}}}}
		}, "shell.network.secrets[0].domains[0]"},
		{"a secret with a bad env name", func(g *routerv1.Gateway) {
			g.Shell.Network = &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"api.github.com"},
				Secrets: []*executorv1.NetworkSecret{{Env: "GH-TOKEN", Value: "x", Domains: []string{"api.github.com"}}}}
		}, "shell.network.secrets[0].env"},
		{"allowlist of names, suffixes, IDNA and IP literals", func(g *routerv1.Gateway) {
			g.Shell.Network = &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"API.github.com", "*.pypi.org", "bücher.example", "192.0.2.1"}, Ports: []int32{443, 22}}
		}, ""},
		{"reserved webhook name", func(g *routerv1.Gateway) { g.Tools.Webhooks[0].Name = "shell" }, "tools.webhooks[0].name"},
		{"webhook url", func(g *routerv1.Gateway) { g.Tools.Webhooks[0].Url = "file:///etc/passwd" }, "tools.webhooks[0].url"},
		{"webhook schema not json", func(g *routerv1.Gateway) { g.Tools.Webhooks[0].ParametersSchema = "{" }, "tools.webhooks[0].parameters_schema"},
		{"webhook schema not object", func(g *routerv1.Gateway) { g.Tools.Webhooks[0].ParametersSchema = `{"type":"string"}` }, "tools.webhooks[0].parameters_schema"},
		{"header injection", func(g *routerv1.Gateway) { g.Tools.Webhooks[0].Headers["X-A"] = "v\r\nHost: evil" }, "tools.webhooks[0].headers"},
		{"duplicate tool", func(g *routerv1.Gateway) { g.Tools.Webhooks = append(g.Tools.Webhooks, g.Tools.Webhooks[0]) }, "tools.webhooks[1].name"},
		{"builtin clash", func(g *routerv1.Gateway) {
			g.Tools.Webhooks[0].Name = "request"
			g.Tools.Builtins = &routerv1.BuiltinTools{Request: true}
		}, "tools.builtins.request"},
		{"moving a reserved tool", func(g *routerv1.Gateway) {
			g.Shell.Tools = &routerv1.ShellTools{Mode: routerv1.ToolsMode_TOOLS_MODE_WHITELIST, Names: []string{"read_skill"}}
		}, "shell.tools.names[0]"},
		{"names without mode", func(g *routerv1.Gateway) { g.Shell.Tools = &routerv1.ShellTools{Names: []string{"get_users"}} }, "shell.tools.mode"},
		{"bad exec security", func(g *routerv1.Gateway) { g.Exec = &approvalv1.ExecSettings{Security: 7} }, "exec.security"},
		{"relative path prepend", func(g *routerv1.Gateway) { g.Exec = &approvalv1.ExecSettings{PathPrepend: []string{"bin"}} }, "exec.path_prepend[0]"},
		{"safe bin with path", func(g *routerv1.Gateway) { g.Exec = &approvalv1.ExecSettings{SafeBins: []string{"/usr/bin/jq"}} }, "exec.safe_bins[0]"},
		{"deny rule on a bare name", func(g *routerv1.Gateway) {
			g.Exec = &approvalv1.ExecSettings{Deny: []*approvalv1.DenyRule{{Id: "x", Pattern: "rm"}}}
		}, "exec.deny[0].pattern"},
		{"deny rule without an id", func(g *routerv1.Gateway) {
			g.Exec = &approvalv1.ExecSettings{Deny: []*approvalv1.DenyRule{{Pattern: "/usr/bin/rm"}}}
		}, "exec.deny[0].id"},
		{"deny rule with a bad argument glob", func(g *routerv1.Gateway) {
			g.Exec = &approvalv1.ExecSettings{Deny: []*approvalv1.DenyRule{{Id: "x", Pattern: "/usr/bin/rm", ArgPattern: "[x"}}}
		}, "exec.deny[0].arg_pattern"},
		{"deny rules with one id", func(g *routerv1.Gateway) {
			g.Exec = &approvalv1.ExecSettings{Deny: []*approvalv1.DenyRule{{Id: "x", Pattern: "/a"}, {Id: "x", Pattern: "/b"}}}
		}, "exec.deny[1].id"},
		{"duplicate skill", func(g *routerv1.Gateway) {
			g.Skills = []*routerv1.Skill{{Name: "deploy"}, {Name: "deploy"}}
		}, "skills[1].name"},
		{"iterations", func(g *routerv1.Gateway) { g.MaxIterations = -1 }, "max_iterations"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := valid()
			tt.mutate(g)
			err := Validate(g, nil, ceiling.Defaults)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if errs.KindOf(err) != errs.InvalidArgument || !strings.HasPrefix(err.Error(), tt.wantField+":") {
				t.Fatalf("Validate = %v, want InvalidArgument starting with %q", err, tt.wantField+":")
			}
		})
	}
}

func TestStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, etcdxtest.StartForTest(t), sealtest.Keyring(t))

	created, err := s.Create(ctx, "acme", valid())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, "acme", valid()); errs.KindOf(err) != errs.AlreadyExists {
		t.Fatalf("second create = %v, want AlreadyExists", err)
	}
	// Same name in another account is another gateway; neither sees the other.
	if _, err := s.Create(ctx, "other", valid()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "acme-2", "prod"); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("get from an account that is a prefix match = %v, want NotFound", err)
	}

	// Secrets are stored, never returned by Redact, and kept on update.
	got, err := s.Get(ctx, "acme", "prod")
	if err != nil || got.GetUpstream().GetApiKey() != "sk-secret" {
		t.Fatalf("Get = %v, %v", got, err)
	}
	red := Redact(got)
	if red.GetUpstream().GetApiKey() != "" || !red.GetUpstream().GetApiKeySet() || red.GetTools().GetWebhooks()[0].GetHeaders()["Authorization"] != "" {
		t.Fatalf("Redact leaked secrets: %v", red)
	}
	upd := proto.Clone(red).(*routerv1.Gateway)
	upd.Shell.TimeoutSeconds = 301
	if _, err := s.Update(ctx, "acme", "prod", upd, nil); errs.KindOf(err) != errs.InvalidArgument {
		t.Fatalf("update with timeout 301 = %v, want InvalidArgument", err)
	}
	upd.Shell.TimeoutSeconds = 45
	after, err := s.Update(ctx, "acme", "prod", upd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if after.GetUpstream().GetApiKey() != "sk-secret" || after.GetTools().GetWebhooks()[0].GetHeaders()["Authorization"] != "Bearer hook-secret" {
		t.Fatalf("update lost secrets: %v", after)
	}
	if !after.GetCreatedAt().AsTime().Equal(created.GetCreatedAt().AsTime()) || after.GetShell().GetTimeoutSeconds() != 45 {
		t.Fatalf("update = %v", after)
	}
	if _, err := s.Update(ctx, "acme", "prod", &routerv1.Gateway{Name: "renamed", Upstream: valid().Upstream}, nil); errs.KindOf(err) != errs.InvalidArgument {
		t.Fatalf("rename = %v, want InvalidArgument", err)
	}

	list, err := s.List(ctx, "acme")
	if err != nil || len(list) != 1 {
		t.Fatalf("List = %v, %v", list, err)
	}

	// The watched cache follows creates, updates and deletes.
	go s.Watch(ctx)
	waitCached := func(name string, want func(*routerv1.Gateway, error) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s.mu.RLock()
			synced := s.synced
			s.mu.RUnlock()
			g, err := s.Get(ctx, "acme", name)
			if synced && want(g, err) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("cache never reached the expected state for %s: %v %v", name, g, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCached("prod", func(g *routerv1.Gateway, err error) bool { return err == nil && g.GetShell().GetTimeoutSeconds() == 45 })
	// A name that makes a cached gateway's key through a "/" is no name.
	if _, err := s.Create(ctx, "acme/x", valid()); err != nil {
		t.Fatal(err)
	}
	waitCached("x/prod", func(_ *routerv1.Gateway, err error) bool {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.cache[key("acme/x", "prod")] != nil && errs.KindOf(err) == errs.NotFound
	})
	g2 := valid()
	g2.Name = "staging"
	if _, err := s.Create(ctx, "acme", g2); err != nil {
		t.Fatal(err)
	}
	waitCached("staging", func(g *routerv1.Gateway, err error) bool { return err == nil })
	if err := s.Delete(ctx, "acme", "staging"); err != nil {
		t.Fatal(err)
	}
	waitCached("staging", func(_ *routerv1.Gateway, err error) bool { return errs.KindOf(err) == errs.NotFound })
	if err := s.Delete(ctx, "acme", "staging"); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("second delete = %v, want NotFound", err)
	}

	// Ensure does not overwrite an existing gateway.
	if err := s.Ensure(ctx, "acme", &routerv1.Gateway{Name: "prod", Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_SCRIPTED}}); err != nil {
		t.Fatal(err)
	}
	kept, _, err := s.get(ctx, "acme", "prod")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(after, kept, protocmp.Transform()); diff != "" {
		t.Errorf("Ensure changed the gateway (-want +got):\n%s", diff)
	}
}

// A network secret is stored, never shown, kept by an update that leaves
// it empty, and required on create.
func TestNetworkSecretsAreWriteOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, etcdxtest.StartForTest(t), sealtest.Keyring(t))
	g := valid()
	g.Shell.Network = &executorv1.Network{Mode: executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST, AllowedDomains: []string{"api.github.com"},
		Secrets: []*executorv1.NetworkSecret{{Env: "GH_TOKEN", Value: "ghp-secret", Domains: []string{"api.github.com"}, Header: "Authorization"}}}
	if _, err := s.Create(ctx, "acme", g); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "acme", "prod")
	if err != nil {
		t.Fatal(err)
	}
	red := Redact(got)
	if sec := red.GetShell().GetNetwork().GetSecrets()[0]; sec.GetValue() != "" || !sec.GetValueSet() {
		t.Fatalf("Redact = %v", sec)
	}
	after, err := s.Update(ctx, "acme", "prod", red, nil)
	if err != nil || after.GetShell().GetNetwork().GetSecrets()[0].GetValue() != "ghp-secret" {
		t.Fatalf("update lost the secret: %v %v", after, err)
	}
	g2 := proto.Clone(red).(*routerv1.Gateway)
	g2.Name = "fresh"
	if _, err := s.Create(ctx, "acme", g2); errs.KindOf(err) != errs.InvalidArgument || !strings.Contains(err.Error(), "shell.network.secrets[0].value") {
		t.Fatalf("create without a value = %v", err)
	}
}

// A write through a store is read back from it at once, whether or not its
// watch has brought the write yet: here no watch runs after the cache was
// loaded, as when its events lag.
func TestReadYourWrites(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	s := newStore(t, cli, newRing(t, newKey(t, "k1")))
	ctx := t.Context()
	if _, err := s.Create(ctx, "acme", valid()); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.load(resp.Kvs, resp.Header.GetRevision()); err != nil {
		t.Fatal(err)
	}
	g := valid()
	g.Shell.TimeoutSeconds = 77
	if _, err := s.Update(ctx, "acme", g.GetName(), g, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "acme", g.GetName()); err != nil || got.GetShell().GetTimeoutSeconds() != 77 {
		t.Fatalf("read after update: %v %v", got.GetShell(), err)
	}
	if err := s.Delete(ctx, "acme", g.GetName()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "acme", g.GetName()); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("read after delete: %v", err)
	}
}
