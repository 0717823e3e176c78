package skills

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/skillfs"
)

// ManifestName is the file at the top of a skill's directory whose front
// matter names and describes it.
const ManifestName = "SKILL.md"

// MaxDescriptionLen bounds the front matter's description, as
// Anthropic's API does.
const MaxDescriptionLen = 1024

// File is a file of a bundle: its path below the bundle's directory, its
// mode (0o755 for an executable file, else 0o644) and its content.
type File = skillfs.File

// Bundle is a skill version as uploaded and checked: one directory holding
// SKILL.md and what it refers to.
type Bundle struct {
	// Dir is the top-level directory the upload held.
	Dir string
	// Name and Description are SKILL.md's front matter's.
	Name, Description string
	// Files are the files below Dir, sorted by path.
	Files []File
	// Size is the files' bytes in total.
	Size int64
}

// upload gathers an upload's files one at a time and refuses, as soon as
// it sees one, what a bundle may not hold.
type upload struct {
	field string
	files map[string]File
	size  int64
}

func newUpload(field string) *upload { return &upload{field: field, files: map[string]File{}} }

// add adds the file at name (as uploaded: its top-level directory first),
// reading at most what the size limit leaves.
func (u *upload) add(name string, mode fs.FileMode, r io.Reader) error {
	if mode&fs.ModeType != 0 {
		return errs.Invalid(u.field, "%q is not a regular file: a skill holds regular files and directories only", name)
	}
	clean, err := skillfs.CheckPath(name)
	if err != nil {
		return errs.Invalid(u.field, "%q: %v", name, err)
	}
	if _, dup := u.files[clean]; dup {
		return errs.Invalid(u.field, "%q is uploaded twice", clean)
	}
	if len(u.files) >= contract.MaxSkillFiles {
		return tooLarge(u.field, "a skill holds at most %d files", contract.MaxSkillFiles)
	}
	// Counted while read: a zip's sizes are what its headers claim.
	b, err := io.ReadAll(io.LimitReader(r, contract.MaxSkillBytes-u.size+1))
	if err != nil {
		return errs.Invalid(u.field, "%q cannot be read: %v", name, err)
	}
	u.size += int64(len(b))
	if u.size > contract.MaxSkillBytes {
		return tooLarge(u.field, "a skill's files hold at most %d bytes in total, uncompressed", contract.MaxSkillBytes)
	}
	fm := uint32(0o644)
	if mode&0o111 != 0 {
		fm = 0o755
	}
	u.files[clean] = File{Path: clean, Mode: fm, Content: b}
	return nil
}

// bundle checks that the upload is one directory holding SKILL.md, and
// reads its front matter.
func (u *upload) bundle() (*Bundle, error) {
	if len(u.files) == 0 {
		return nil, errs.Invalid(u.field, "no files: upload a directory holding %s", ManifestName)
	}
	var dir string
	for p := range u.files {
		top, _, nested := strings.Cut(p, "/")
		if !nested {
			return nil, errs.Invalid(u.field, "%q is not in a directory: every file must be below one top-level directory holding %s", p, ManifestName)
		}
		if dir != "" && top != dir {
			return nil, errs.Invalid(u.field, "files are in %q and %q: every file must be below one top-level directory", dir, top)
		}
		dir = top
	}
	manifest, ok := u.files[dir+"/"+ManifestName]
	if !ok {
		return nil, errs.Invalid(u.field, "%s/%s is missing: a skill's directory must hold %s", dir, ManifestName, ManifestName)
	}
	name, desc, err := frontMatter(manifest.Content)
	if err != nil {
		return nil, errs.Invalid(u.field, "%s/%s: %v", dir, ManifestName, err)
	}
	b := &Bundle{Dir: dir, Name: name, Description: desc, Size: u.size}
	for p, f := range u.files {
		f.Path = strings.TrimPrefix(p, dir+"/")
		b.Files = append(b.Files, f)
	}
	slices.SortFunc(b.Files, func(x, y File) int { return strings.Compare(x.Path, y.Path) })
	for i := 1; i < len(b.Files); i++ {
		// "a" and "a/b" cannot both be: a file is not a directory.
		if strings.HasPrefix(b.Files[i].Path, b.Files[i-1].Path+"/") {
			return nil, errs.Invalid(u.field, "%q is a file and a directory", dir+"/"+b.Files[i-1].Path)
		}
	}
	return b, nil
}

// frontMatter reads SKILL.md's YAML front matter: its name and its
// description are required.
func frontMatter(md []byte) (name, description string, err error) {
	s := strings.TrimPrefix(string(md), "\ufeff")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	rest, ok := strings.CutPrefix(s, "---\n")
	if !ok {
		return "", "", errors.New(`must start with YAML front matter between "---" lines, naming (name) and describing (description) the skill`)
	}
	fm, _, ok := strings.Cut(rest, "\n---")
	if !ok {
		return "", "", errors.New(`its front matter has no closing "---" line`)
	}
	var m struct {
		Name        any `json:"name"`
		Description any `json:"description"`
	}
	if err := yaml.Unmarshal([]byte(fm), &m); err != nil {
		return "", "", fmt.Errorf("its front matter is not YAML: %v", err)
	}
	name, _ = m.Name.(string)
	description, _ = m.Description.(string)
	description = strings.TrimSpace(description)
	switch {
	case name == "":
		return "", "", errors.New("front matter: name is required, a string")
	case !skillfs.ValidName(name):
		return "", "", fmt.Errorf("front matter: name %q must be %s", name, skillfs.NameRule)
	case description == "":
		return "", "", errors.New("front matter: description is required, a string")
	case utf8.RuneCountInString(description) > MaxDescriptionLen:
		return "", "", fmt.Errorf("front matter: description is at most %d characters", MaxDescriptionLen)
	}
	return name, description, nil
}

func tooLarge(field, format string, args ...any) error {
	return &errs.Error{Kind: errs.InvalidArgument, Reason: errs.ReasonRequestTooLarge, Field: field, Msg: field + ": " + fmt.Sprintf(format, args...)}
}

// FromZip reads a bundle from a zip archive. Its sizes are counted as it
// inflates, so an archive claiming less than it holds is refused too.
func FromZip(field string, b []byte) (*Bundle, error) {
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, errs.Invalid(field, "not a zip archive: %v", err)
	}
	u := newUpload(field)
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") && f.Mode().IsDir() {
			continue
		}
		if f.Mode()&fs.ModeType != 0 {
			return nil, errs.Invalid(field, "%q is not a regular file: a skill holds regular files and directories only", f.Name)
		}
		rc, err := f.Open()
		if err != nil {
			return nil, errs.Invalid(field, "%q cannot be read: %v", f.Name, err)
		}
		err = u.add(f.Name, f.Mode(), rc)
		_ = rc.Close()
		if err != nil {
			return nil, err
		}
	}
	return u.bundle()
}

// IsZip reports whether b starts as a zip archive does.
func IsZip(b []byte) bool { return bytes.HasPrefix(b, []byte("PK\x03\x04")) }

// Zip is the bundle as a zip archive below its directory: what is stored
// and what /content answers.
func (b *Bundle) Zip() ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range b.Files {
		h := &zip.FileHeader{Name: b.Dir + "/" + f.Path, Method: zip.Deflate}
		h.SetMode(fs.FileMode(f.Mode))
		h.Modified = time.Unix(0, 0).UTC()
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(f.Content); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Form is a multipart upload: its bundle and its other fields.
type Form struct {
	Bundle *Bundle
	// Values are the fields that are not files, the first value of each.
	Values map[string]string
}

// maxFieldBytes bounds a multipart field that is not a file.
const maxFieldBytes = 4096

// FromMultipart reads an upload of the SDKs: the files as parts named
// "files" or "files[]" whose file names carry their paths, or one zip
// archive of them; and the form's other fields.
func FromMultipart(mr *multipart.Reader) (*Form, error) {
	const field = "files"
	u := newUpload(field)
	form := &Form{Values: map[string]string{}}
	var zipped []byte
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errs.Invalid(field, "the multipart body cannot be read: %v", err)
		}
		_, params, _ := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
		name := params["name"]
		if name != "files" && name != "files[]" {
			v, err := io.ReadAll(io.LimitReader(p, maxFieldBytes+1))
			if err != nil {
				return nil, errs.Invalid(name, "cannot be read: %v", err)
			}
			if len(v) > maxFieldBytes {
				return nil, errs.Invalid(name, "is at most %d bytes", maxFieldBytes)
			}
			if _, seen := form.Values[name]; !seen {
				form.Values[name] = string(v)
			}
			continue
		}
		// Part.FileName keeps only the last element; the path is the
		// point here.
		filename := params["filename"]
		if zipped != nil {
			return nil, errs.Invalid(field, "a zip archive is uploaded alone")
		}
		before := len(u.files)
		if err := u.add(filename, 0o644, p); err != nil {
			return nil, err
		}
		if f := u.files[strings.ReplaceAll(filename, "\\", "/")]; before == 0 && strings.HasSuffix(strings.ToLower(filename), ".zip") && !strings.Contains(filename, "/") && IsZip(f.Content) {
			zipped = f.Content
		}
	}
	if zipped != nil {
		if len(u.files) > 1 {
			return nil, errs.Invalid(field, "a zip archive is uploaded alone")
		}
		b, err := FromZip(field, zipped)
		if err != nil {
			return nil, err
		}
		form.Bundle = b
		return form, nil
	}
	b, err := u.bundle()
	if err != nil {
		return nil, err
	}
	form.Bundle = b
	return form, nil
}
