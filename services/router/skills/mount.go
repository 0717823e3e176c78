package skills

import (
	"context"
	"fmt"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/router/completion"
)

var _ completion.SkillSource = (*Store)(nil)

// Mount resolves the skills a request names in account and reads their
// files, for the sandbox it creates. Two skills of one name would share a
// directory, and the sandbox's skills are bounded in number and in size:
// each is refused naming the field.
func (s *Store) Mount(ctx context.Context, account string, refs []completion.SkillRef) ([]completion.MountedSkill, error) {
	if len(refs) > contract.MaxSandboxSkills {
		return nil, errs.Invalid(refs[contract.MaxSandboxSkills].Field, "a sandbox mounts at most %d skills", contract.MaxSandboxSkills)
	}
	out := make([]completion.MountedSkill, 0, len(refs))
	byName := map[string]string{}
	var total int64
	for _, ref := range refs {
		sk, v, err := s.Resolve(ctx, account, ref.ID, ref.Version, ref.Field)
		if err != nil {
			return nil, err
		}
		if other, dup := byName[v.Name]; dup {
			return nil, errs.Invalid(ref.Field+".skill_id", "skill %s is named %q, as %s is: they would be mounted in one directory", sk.ID, v.Name, other)
		}
		byName[v.Name] = sk.ID
		if total += v.Size; total > contract.MaxSandboxSkillBytes {
			return nil, tooLarge(ref.Field, "a sandbox's skills hold at most %d bytes in total", contract.MaxSandboxSkillBytes)
		}
		z, err := s.Archive(ctx, v)
		if err != nil {
			return nil, err
		}
		b, err := FromZip(ref.Field, z)
		if err != nil {
			return nil, fmt.Errorf("skills: the archive of %s version %s: %w", sk.ID, v.Version, err)
		}
		pb := &executorv1.SkillBundle{Name: v.Name, Version: v.Version, Id: sk.ID}
		for _, f := range b.Files {
			pb.Files = append(pb.Files, &executorv1.SkillFile{Path: f.Path, Mode: f.Mode, Content: f.Content})
		}
		out = append(out, completion.MountedSkill{ID: sk.ID, Version: v.Version, Name: v.Name, Description: v.Description, Bundle: pb})
	}
	return out, nil
}
