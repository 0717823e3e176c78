package skills

import (
	"archive/zip"
	"bytes"
	"io/fs"
	"mime/multipart"
	"net/textproto"
	"strconv"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

const manifest = "---\nname: pdf-tools\ndescription: Fill and read PDF forms.\n---\n# PDF tools\n"

type zipEntry struct {
	name string
	mode fs.FileMode
	body string
}

func makeZip(t *testing.T, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		h.SetMode(e.mode | 0o644)
		if e.mode == 0 {
			h.SetMode(0o644)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(e.body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type part struct{ field, filename, body string }

func makeForm(t *testing.T, parts ...part) *multipart.Reader {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		if p.filename != "" {
			h.Set("Content-Disposition", `form-data; name="`+p.field+`"; filename="`+p.filename+`"`)
		} else {
			h.Set("Content-Disposition", `form-data; name="`+p.field+`"`)
		}
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(p.body))
	}
	_ = mw.Close()
	return multipart.NewReader(&buf, mw.Boundary())
}

func TestFromMultipart(t *testing.T) {
	f, err := FromMultipart(makeForm(t,
		part{"files[]", "pdf/SKILL.md", manifest},
		part{"files[]", "pdf/scripts/fill.py", "print(1)"},
		part{"display_name", "", "PDF"},
	))
	if err != nil {
		t.Fatal(err)
	}
	b := f.Bundle
	if b.Dir != "pdf" || b.Name != "pdf-tools" || b.Description != "Fill and read PDF forms." || len(b.Files) != 2 || f.Values["display_name"] != "PDF" {
		t.Fatalf("bundle %+v, values %v", b, f.Values)
	}
	if b.Files[0].Path != "SKILL.md" || b.Files[1].Path != "scripts/fill.py" || b.Size != int64(len(manifest)+8) {
		t.Fatalf("files %+v size %d", b.Files, b.Size)
	}
	// One zip, under the name the OpenAI SDK sends a single file with.
	z := makeZip(t, zipEntry{name: "pdf/"}, zipEntry{name: "pdf/SKILL.md", body: manifest}, zipEntry{name: "pdf/run.sh", mode: 0o755, body: "#!/bin/sh"})
	f, err = FromMultipart(makeForm(t, part{"files", "pdf.zip", string(z)}))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Bundle.Files) != 2 || f.Bundle.Files[0].Path != "SKILL.md" || f.Bundle.Files[1].Mode != 0o755 {
		t.Fatalf("zip bundle %+v", f.Bundle.Files)
	}
	// Its own archive reads back the same.
	again, err := f.Bundle.Zip()
	if err != nil {
		t.Fatal(err)
	}
	if back, err := FromZip("files", again); err != nil || len(back.Files) != 2 || back.Dir != "pdf" {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

// TestBadUploads gives every refused upload a clear error naming the
// field, and 413 to those too large.
func TestBadUploads(t *testing.T) {
	big := strings.Repeat("x", contract.MaxSkillBytes)
	many := []part{{"files[]", "d/SKILL.md", manifest}}
	for i := range contract.MaxSkillFiles {
		many = append(many, part{"files[]", "d/f" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "/" + strconv.Itoa(i), "x"})
	}
	tests := []struct {
		name  string
		parts []part
		zip   []zipEntry
		want  string
		large bool
	}{
		{name: "no files", parts: []part{{"display_name", "", "x"}}, want: "no files"},
		{name: "absolute", parts: []part{{"files[]", "/d/SKILL.md", manifest}}, want: "must be relative"},
		{name: "dotdot", parts: []part{{"files[]", "d/../SKILL.md", manifest}}, want: `".."`},
		{name: "dot", parts: []part{{"files[]", "d/./SKILL.md", manifest}}, want: `"."`},
		{name: "empty name", parts: []part{{"files[]", "", manifest}}, want: "name holding its path"},
		{name: "top level file", parts: []part{{"files[]", "SKILL.md", manifest}}, want: "not in a directory"},
		{name: "two dirs", parts: []part{{"files[]", "a/SKILL.md", manifest}, {"files[]", "b/x", "x"}}, want: "one top-level directory"},
		{name: "duplicate", parts: []part{{"files[]", "d/SKILL.md", manifest}, {"files[]", "d/SKILL.md", manifest}}, want: "uploaded twice"},
		{name: "file and dir", parts: []part{{"files[]", "d/SKILL.md", manifest}, {"files[]", "d/a", "x"}, {"files[]", "d/a/b", "x"}}, want: "a file and a directory"},
		{name: "no manifest", parts: []part{{"files[]", "d/README.md", "x"}}, want: "SKILL.md is missing"},
		{name: "no front matter", parts: []part{{"files[]", "d/SKILL.md", "# hi"}}, want: "front matter"},
		{name: "unclosed front matter", parts: []part{{"files[]", "d/SKILL.md", "---\nname: a\n"}}, want: "closing"},
		{name: "no name", parts: []part{{"files[]", "d/SKILL.md", "---\ndescription: x\n---\n"}}, want: "name is required"},
		{name: "bad name", parts: []part{{"files[]", "d/SKILL.md", "---\nname: PDF Tools\ndescription: x\n---\n"}}, want: "lowercase"},
		{name: "no description", parts: []part{{"files[]", "d/SKILL.md", "---\nname: a\n---\n"}}, want: "description is required"},
		{name: "long description", parts: []part{{"files[]", "d/SKILL.md", "---\nname: a\ndescription: " + strings.Repeat("y", MaxDescriptionLen+1) + "\n---\n"}}, want: "at most 1024"},
		{name: "not yaml", parts: []part{{"files[]", "d/SKILL.md", "---\nname: [\n---\n"}}, want: "not YAML"},
		{name: "too large", parts: []part{{"files[]", "d/SKILL.md", manifest}, {"files[]", "d/big", big}}, want: "at most 8388608 bytes", large: true},
		{name: "too many", parts: many, want: "at most 500 files", large: true},
		{name: "zip with others", parts: []part{{"files", "s.zip", string(makeZip(t, zipEntry{name: "d/SKILL.md", body: manifest}))}, {"files", "d/x", "x"}}, want: "uploaded alone"},
		{name: "zip symlink", zip: []zipEntry{{name: "d/SKILL.md", body: manifest}, {name: "d/link", mode: fs.ModeSymlink, body: "/etc/passwd"}}, want: "not a regular file"},
		{name: "zip dotdot", zip: []zipEntry{{name: "d/SKILL.md", body: manifest}, {name: "d/../../x", body: "x"}}, want: `".."`},
		{name: "zip bomb", zip: []zipEntry{{name: "d/SKILL.md", body: manifest}, {name: "d/zeros", body: strings.Repeat("\x00", contract.MaxSkillBytes+1)}}, want: "at most 8388608 bytes", large: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.zip != nil {
				_, err = FromZip("files", makeZip(t, tt.zip...))
			} else {
				_, err = FromMultipart(makeForm(t, tt.parts...))
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			a := errs.Public(err)
			if a.Param != "files" {
				t.Errorf("param = %q, want files", a.Param)
			}
			if want := map[bool]int{false: 400, true: 413}[tt.large]; a.Status != want {
				t.Errorf("status = %d, want %d", a.Status, want)
			}
		})
	}
}
