package completion

import (
	"context"
	"fmt"
	"slices"
	"strings"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/contract"
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
func keptSkills(req *Request, mounted []MountedSkill, sb *executorv1.Sandbox, what string) error {
	if len(mounted) == 0 {
		return nil
	}
	want := make([]string, len(mounted))
	for i, m := range mounted {
		want[i] = m.ID + "@" + m.Version
	}
	have := make([]string, len(sb.GetSkills()))
	for i, b := range sb.GetSkills() {
		have[i] = b.GetId() + "@" + b.GetVersion()
	}
	slices.Sort(want)
	slices.Sort(have)
	if slices.Equal(want, have) {
		return nil
	}
	listed := "none"
	if len(have) > 0 {
		listed = strings.Join(have, ", ")
	}
	return BadField(req.SkillsField, "%s %s was made with the skills %s (id@version), and skills are mounted only when a sandbox is created: name the same skills, or none", what, sb.GetId(), listed)
}
