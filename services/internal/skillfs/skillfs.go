// Package skillfs owns what a skill's files may be, for the router, which
// checks an upload, and for the executor, which checks again what it is
// sent before it writes a skill into a sandbox (docs/reference/skills.md):
// the name rule, the path rule and the writing itself.
package skillfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/internal/contract"
)

const (
	// MaxNameLen bounds a skill's name, as Anthropic's API does.
	MaxNameLen = 64
	// MaxPathLen bounds a file's path in a skill.
	MaxPathLen = 512
	// NameRule says what a name must be, for errors.
	NameRule = "1-64 lowercase letters, digits and hyphens, not starting or ending with a hyphen"
)

// nameRule is the rule of a skill's name: it names the skill's directory
// in a sandbox.
var (
	nameRule = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	idRule   = regexp.MustCompile(`^skill_[a-z0-9]{1,64}$`)
)

// ValidID reports whether id is what a skill's id can be (skill_ and
// lowercase letters or digits), before it reaches a key: the skills store,
// a gateway's shell.skills and a request's skills all hold ids to it.
func ValidID(id string) bool { return idRule.MatchString(id) }

// ValidName reports whether name may name a skill.
func ValidName(name string) bool { return len(name) <= MaxNameLen && nameRule.MatchString(name) }

// CheckPath returns a file's path as a skill keeps it: relative,
// '/'-separated (a '\' is taken for one), with no "." or ".." segment, no
// empty one and nothing unprintable.
func CheckPath(name string) (string, error) {
	name = strings.ReplaceAll(name, "\\", "/")
	switch {
	case name == "":
		return "", errors.New("a file needs a name holding its path")
	case len(name) > MaxPathLen:
		return "", fmt.Errorf("paths are at most %d bytes", MaxPathLen)
	case !utf8.ValidString(name):
		return "", errors.New("paths must be UTF-8")
	case strings.HasPrefix(name, "/") || (len(name) > 1 && name[1] == ':'):
		return "", errors.New("paths must be relative")
	}
	for seg := range strings.SplitSeq(name, "/") {
		switch {
		case seg == "..":
			return "", errors.New(`paths must not hold ".."`)
		case seg == "" || seg == ".":
			return "", errors.New(`paths must not hold empty or "." segments`)
		case strings.ContainsFunc(seg, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			return "", errors.New("paths must not hold control characters")
		}
	}
	return name, nil
}

// File is a file of a skill.
type File struct {
	Path    string
	Mode    uint32
	Content []byte
}

// Skill is a skill to write: its name and files, and its id and version
// for the record.
type Skill struct {
	Name        string
	ID, Version string
	Files       []File
}

// Check refuses skills a sandbox may not mount: too many, a bad or
// repeated name, a bad path, a path that is a file and a directory, a
// mode other than 0644 or 0755, or more files or bytes than the limits.
// field names the skills in errors ("skills").
func Check(field string, skills []Skill) error {
	if len(skills) > contract.MaxSandboxSkills {
		return fmt.Errorf("%s: a sandbox mounts at most %d skills", field, contract.MaxSandboxSkills)
	}
	names := map[string]bool{}
	var total int64
	for i, sk := range skills {
		f := fmt.Sprintf("%s[%d]", field, i)
		if !ValidName(sk.Name) {
			return fmt.Errorf("%s.name: must be %s", f, NameRule)
		}
		if names[sk.Name] {
			return fmt.Errorf("%s.name: %q is mounted twice", f, sk.Name)
		}
		names[sk.Name] = true
		if len(sk.Files) > contract.MaxSkillFiles {
			return fmt.Errorf("%s.files: at most %d files", f, contract.MaxSkillFiles)
		}
		kinds := map[string]bool{} // path → is a directory
		var size int64
		for j, file := range sk.Files {
			ff := fmt.Sprintf("%s.files[%d]", f, j)
			p, err := CheckPath(file.Path)
			if err != nil || p != file.Path {
				if err == nil {
					err = errors.New("paths must be '/'-separated")
				}
				return fmt.Errorf("%s.path: %q: %v", ff, file.Path, err)
			}
			if file.Mode != 0o644 && file.Mode != 0o755 {
				return fmt.Errorf("%s.mode: must be 0644 or 0755", ff)
			}
			if isDir, seen := kinds[p]; seen {
				if isDir {
					return fmt.Errorf("%s.path: %q is a file and a directory", ff, p)
				}
				return fmt.Errorf("%s.path: %q is given twice", ff, p)
			}
			kinds[p] = false
			for d := path.Dir(p); d != "."; d = path.Dir(d) {
				if isDir, seen := kinds[d]; seen && !isDir {
					return fmt.Errorf("%s.path: %q is below a file", ff, p)
				}
				kinds[d] = true
			}
			size += int64(len(file.Content))
		}
		if size > contract.MaxSkillBytes {
			return fmt.Errorf("%s.files: at most %d bytes in total", f, contract.MaxSkillBytes)
		}
		total += size
	}
	if total > contract.MaxSandboxSkillBytes {
		return fmt.Errorf("%s: a sandbox's skills hold at most %d bytes in total", field, contract.MaxSandboxSkillBytes)
	}
	return nil
}

// Write writes skills, checked by Check, below dir: one directory per
// skill, named after it. Files are created anew, never through a link, and
// are readable by everyone; a sandbox sees them read-only.
func Write(dir string, skills []Skill) error {
	for _, sk := range skills {
		root := filepath.Join(dir, sk.Name)
		if err := os.Mkdir(root, 0o755); err != nil {
			return fmt.Errorf("skillfs: %w", err)
		}
		for _, f := range sk.Files {
			p := filepath.Join(root, filepath.FromSlash(f.Path))
			if err := mkdirs(root, filepath.Dir(p)); err != nil {
				return err
			}
			fd, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, os.FileMode(f.Mode))
			if err != nil {
				return fmt.Errorf("skillfs: %w", err)
			}
			_, err = fd.Write(f.Content)
			if err == nil {
				// Whatever the umask took.
				err = fd.Chmod(os.FileMode(f.Mode))
			}
			if cerr := fd.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("skillfs: %w", err)
			}
		}
	}
	return nil
}

// mkdirs makes the directories from root down to dir, refusing to go
// through anything that is not a directory.
func mkdirs(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." {
		return err
	}
	cur := root
	for seg := range strings.SplitSeq(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, seg)
		if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("skillfs: %w", err)
		}
		fi, err := os.Lstat(cur)
		if err != nil {
			return fmt.Errorf("skillfs: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("skillfs: %s is not a directory", cur)
		}
		if err := os.Chmod(cur, 0o755); err != nil {
			return fmt.Errorf("skillfs: %w", err)
		}
	}
	return nil
}
