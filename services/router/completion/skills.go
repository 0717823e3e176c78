package completion

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// SkillRef is a skill a request names to mount in its sandbox.
type SkillRef struct {
	// ID is the skill's id; Version its version, "" for the default and
	// "latest" for the newest.
	ID, Version string
	// Field is where the request named it ("container.skills[0]").
	Field string
}

// MountedSkill is a skill as a sandbox mounts it.
type MountedSkill struct {
	ID, Version string
	// Name names its directory, contract.SkillsDir/<name>; Description
	// is what the model is told of it.
	Name, Description string
	// Bundle is its files, for the executor.
	Bundle *executorv1.SkillBundle
}

// SkillSource finds the skills a request names in its account (package
// skills): an unknown id, or another account's, is a 404 naming the
// reference's field.
type SkillSource interface {
	Mount(ctx context.Context, account string, refs []SkillRef) ([]MountedSkill, error)
}

// mountSkills resolves the skills a request names, for a sandbox the
// completion creates.
func (s *Service) mountSkills(ctx context.Context, account string, req *Request) ([]MountedSkill, error) {
	if len(req.Skills) == 0 {
		return nil, nil
	}
	if req.Container != "" {
		return nil, BadField(req.SkillsField, "skills are mounted in a sandbox when it is created; %s names a running container, which keeps the skills it was created with", req.ContainerField)
	}
	if s.opts.Skills == nil {
		return nil, BadField(req.SkillsField, "this router keeps no skills")
	}
	return s.opts.Skills.Mount(ctx, account, req.Skills)
}

// skillsDescription is what the shell tool tells the model of the
// sandbox's skills: enough to know when one applies, and where to read
// the rest.
func skillsDescription(mounted []MountedSkill) string {
	if len(mounted) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Skills (instructions and files for kinds of tasks) are mounted read-only under %s. ", contract.SkillsDir)
	b.WriteString("When the task matches a skill, first read its SKILL.md with this tool (cat) and follow it; it may name other files of the skill to read or run:")
	for _, m := range mounted {
		fmt.Fprintf(&b, " %s (%s/%s/SKILL.md): %s;", m.Name, contract.SkillsDir, m.Name, m.Description)
	}
	b.WriteString(" ")
	return b.String()
}

// keptSkills refuses skills a request names that the running sandbox it
// goes on in (a session's, or the container of the response it
// continues) was not made with: skills are mounted when a sandbox is
// created, and the model must not be told of skills that are not there.
// what says which sandbox it is, for the error.
func keptSkills(req *Request, named []MountedSkill, sb *executorv1.Sandbox, what string) error {
	have := make([]string, len(sb.GetSkills()))
	for i, b := range sb.GetSkills() {
		have[i] = b.GetId() + "@" + b.GetVersion()
	}
	for _, m := range named {
		if !slices.Contains(have, m.ID+"@"+m.Version) {
			slices.Sort(have)
			listed := "none"
			if len(have) > 0 {
				listed = strings.Join(have, ", ")
			}
			return BadField(req.SkillsField, "%s %s was made with the skills %s (id@version), and skills are mounted only when a sandbox is created: name those skills, or none", what, sb.GetId(), listed)
		}
	}
	return nil
}

// gatewaySkills resolves the skills g's shell mounts in every sandbox it
// creates (shell.skills), but those the request names itself (its
// version wins); none for a request that names a running container,
// which keeps the skills it was made with.
func (s *Service) gatewaySkills(ctx context.Context, account string, g *routerv1.Gateway, req *Request) ([]MountedSkill, error) {
	mounts := g.GetShell().GetSkills()
	if len(mounts) == 0 || req.Container != "" {
		return nil, nil
	}
	var refs []SkillRef
	for i, m := range mounts {
		if slices.ContainsFunc(req.Skills, func(r SkillRef) bool { return r.ID == m.GetSkillId() }) {
			continue
		}
		refs = append(refs, SkillRef{ID: m.GetSkillId(), Version: m.GetVersion(), Field: fmt.Sprintf("shell.skills[%d]", i)})
	}
	if len(refs) == 0 {
		return nil, nil
	}
	if s.opts.Skills == nil {
		return nil, &FieldError{Status: http.StatusBadRequest, Field: "model", Msg: fmt.Sprintf("gateway %q mounts skills, and this router keeps none", g.GetName())}
	}
	mounted, err := s.opts.Skills.Mount(ctx, account, refs)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound || errs.KindOf(err) == errs.InvalidArgument {
			// The gateway's owner must mend it; the caller can do
			// nothing but say so.
			return nil, &FieldError{Status: http.StatusBadRequest, Field: "model", Code: "gateway_skill_unavailable",
				Msg: fmt.Sprintf("gateway %q mounts a skill it cannot: %s", g.GetName(), errs.Public(err).Message)}
		}
		return nil, err
	}
	return mounted, nil
}

// inSandbox keeps of mounted the skills sb was made with: the model is told
// of the skills that are there.
func inSandbox(mounted []MountedSkill, sb *executorv1.Sandbox) []MountedSkill {
	var out []MountedSkill
	for _, m := range mounted {
		if slices.ContainsFunc(sb.GetSkills(), func(b *executorv1.SkillBundle) bool { return b.GetId() == m.ID && b.GetVersion() == m.Version }) {
			out = append(out, m)
		}
	}
	return out
}
