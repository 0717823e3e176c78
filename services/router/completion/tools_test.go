package completion

import (
	"errors"
	"strings"
	"testing"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
)

// A gateway with no shell settings at all still takes a request's shell
// tool (allow_request defaults to true).
func TestPlanToolsWithoutShellSettings(t *testing.T) {
	t.Parallel()
	g := &routerv1.Gateway{Name: "bare", Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_SCRIPTED}}
	p, err := planTools(g, nil, &Request{Shell: &ShellTool{}, ShellField: "tools[0]"}, nil)
	if err != nil || p.shell == nil || p.shell.TimeoutSeconds != 60 || p.shell.MaxOutputLength != 4096 {
		t.Fatalf("planTools = %+v, %v", p, err)
	}
	no := false
	g.Shell = &routerv1.ShellSettings{AllowRequest: &no}
	if _, err := planTools(g, nil, &Request{Shell: &ShellTool{}, ShellField: "tools[0]"}, nil); err == nil || !strings.Contains(err.Error(), `gateway "bare"`) {
		t.Fatalf("allow_request false: %v", err)
	}
}

// TestPlanSkills: mounted skills go to the sandbox and are listed in the
// shell's description; without a shell, naming skills is refused.
func TestPlanSkills(t *testing.T) {
	t.Parallel()
	g := &routerv1.Gateway{Name: "g", Upstream: &routerv1.Upstream{Provider: routerv1.Provider_PROVIDER_SCRIPTED}}
	mounted := []MountedSkill{{ID: "skill_1", Version: "1", Name: "pdf-tools", Description: "Fill PDF forms.", Bundle: &executorv1.SkillBundle{Name: "pdf-tools"}}}
	req := &Request{Shell: &ShellTool{}, ShellField: "tools[0]", Skills: []SkillRef{{ID: "skill_1"}}, SkillsField: "container.skills"}
	p, err := planTools(g, nil, req, mounted)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.tools[0].Description; !strings.Contains(d, "pdf-tools (/mnt/skills/pdf-tools/SKILL.md): Fill PDF forms.") {
		t.Fatalf("shell description: %s", d)
	}
	if sr := p.sandboxRequest(g, req); len(sr.GetSkills()) != 1 || sr.GetSkills()[0].GetName() != "pdf-tools" {
		t.Fatalf("sandbox request: %v", sr)
	}
	// The gateway's template is the sandbox's.
	g.Shell = &routerv1.ShellSettings{Template: "py"}
	if sr := p.sandboxRequest(g, req); sr.GetTemplate() != "py" {
		t.Fatalf("sandbox request of a gateway with a template: %v", sr)
	}
	_, err = planTools(g, nil, &Request{Skills: req.Skills, SkillsField: "container.skills"}, mounted)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "container.skills" {
		t.Fatalf("skills without a shell: %v", err)
	}
}

func TestKeptSkills(t *testing.T) {
	t.Parallel()
	req := &Request{SkillsField: "container.skills"}
	sb := &executorv1.Sandbox{Id: "sb-1", Skills: []*executorv1.SkillBundle{{Id: "skill_a", Version: "2"}, {Id: "skill_b", Version: "1"}}}
	m := func(ids ...string) []MountedSkill {
		var out []MountedSkill
		for _, id := range ids {
			i, v, _ := strings.Cut(id, "@")
			out = append(out, MountedSkill{ID: i, Version: v})
		}
		return out
	}
	for _, tt := range []struct {
		name    string
		mounted []MountedSkill
		ok      bool
	}{
		{"none named", nil, true},
		{"the same, in another order", m("skill_b@1", "skill_a@2"), true},
		{"another version", m("skill_a@1", "skill_b@1"), false},
		{"some of them", m("skill_a@2"), true},
		{"one not there", m("skill_a@2", "skill_c@1"), false},
	} {
		err := keptSkills(req, tt.mounted, sb, "the session's sandbox")
		var fe *FieldError
		if tt.ok != (err == nil) || (err != nil && (!errors.As(err, &fe) || fe.Field != "container.skills" || !strings.Contains(fe.Msg, "skill_a@2, skill_b@1"))) {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}
