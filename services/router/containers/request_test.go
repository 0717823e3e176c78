package containers

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/router/completion"
)

func TestParseCreate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		body  string
		want  createParams
		param string // of the error; "-" for an error without one
	}{
		{`{"name":"a"}`, createParams{Name: "a", IdleMinutes: 20, MemoryLimit: "1g"}, ""},
		{`{"name":"a","expires_after":{"anchor":"last_active_at","minutes":90},"memory_limit":"16g","user":"alice",
		   "file_ids":[],"skills":[],"network_policy":{"type":"disabled"}}`,
			createParams{Name: "a", IdleMinutes: 90, MemoryLimit: "16g", User: "alice"}, ""},
		{`{"name":"a","expires_after":null,"memory_limit":null}`, createParams{Name: "a", IdleMinutes: 20, MemoryLimit: "1g"}, ""},
		{`[]`, createParams{}, "-"},
		{`{}`, createParams{}, "name"},
		{`{"name":5}`, createParams{}, "name"},
		{`{"name":"` + strings.Repeat("n", MaxNameChars+1) + `"}`, createParams{}, "name"},
		{`{"name":"a","colour":"red"}`, createParams{}, "colour"},
		{`{"name":"a","expires_after":5}`, createParams{}, "expires_after"},
		{`{"name":"a","expires_after":{"minutes":5}}`, createParams{}, "expires_after.anchor"},
		{`{"name":"a","expires_after":{"anchor":"created_at","minutes":5}}`, createParams{}, "expires_after.anchor"},
		{`{"name":"a","expires_after":{"anchor":"last_active_at"}}`, createParams{}, "expires_after.minutes"},
		{`{"name":"a","expires_after":{"anchor":"last_active_at","minutes":1.5}}`, createParams{}, "expires_after.minutes"},
		{`{"name":"a","expires_after":{"anchor":"last_active_at","minutes":"5"}}`, createParams{}, "expires_after.minutes"},
		{`{"name":"a","expires_after":{"anchor":"last_active_at","minutes":1441}}`, createParams{}, "expires_after.minutes"},
		{`{"name":"a","expires_after":{"anchor":"last_active_at","minutes":5,"hours":1}}`, createParams{}, "expires_after.hours"},
		{`{"name":"a","file_ids":["file-1"]}`, createParams{}, "file_ids"},
		{`{"name":"a","file_ids":"file-1"}`, createParams{}, "file_ids"},
		{`{"name":"a","memory_limit":"2g"}`, createParams{}, "memory_limit"},
		{`{"name":"a","template":"py-3.12"}`, createParams{Name: "a", IdleMinutes: 20, MemoryLimit: "1g", Template: "py-3.12"}, ""},
		{`{"name":"a","template":"../x"}`, createParams{}, "template"},
		{`{"name":"a","template":7}`, createParams{}, "template"},
		{`{"name":"a","network_policy":{"type":"allowlist","allowed_domains":["x.com"]}}`, createParams{}, "network_policy.type"},
		{`{"name":"a","network_policy":{}}`, createParams{}, "network_policy.type"},
		{`{"name":"a","skills":[{"type":"skill_reference","skill_id":"s"},{"type":"skill_reference","skill_id":"t","version":2}]}`,
			createParams{Name: "a", IdleMinutes: 20, MemoryLimit: "1g", Skills: []completion.SkillRef{{ID: "s", Field: "skills[0]"}, {ID: "t", Version: "2", Field: "skills[1]"}}}, ""},
		{`{"name":"a","skills":{}}`, createParams{}, "skills"},
		{`{"name":"a","skills":[{"type":"inline","name":"x"}]}`, createParams{}, "skills[0].type"},
		{`{"name":"a","skills":[{"type":"skill_reference"}]}`, createParams{}, "skills[0].skill_id"},
		{`{"name":"a","skills":[{"type":"skill_reference","skill_id":"s","version":1.5}]}`, createParams{}, "skills[0].version"},
		{`{"name":"a","user":"../etc"}`, createParams{}, "user"},
		{`{"name":"a","user":true}`, createParams{}, "user"},
	}
	for _, c := range cases {
		got, err := parseCreate([]byte(c.body))
		var fe *fieldError
		switch {
		case c.param == "" && err != nil:
			t.Errorf("%s: %v", c.body, err)
		case c.param == "" && !reflect.DeepEqual(got, c.want):
			t.Errorf("%s: got %+v, want %+v", c.body, got, c.want)
		case c.param != "" && !errors.As(err, &fe):
			t.Errorf("%s: error %v, want a field error", c.body, err)
		case c.param != "" && fe.param != strings.TrimPrefix(c.param, "-"):
			t.Errorf("%s: param %q (%v), want %q", c.body, fe.param, err, c.param)
		}
	}
}

func TestParseListAndPage(t *testing.T) {
	t.Parallel()
	items := []string{"a", "b", "c", "d"}
	id := func(s string) string { return s }
	cases := []struct {
		query string
		want  string // the page, then + when more follow; or the param of the error
	}{
		{"", "d c b a"},
		{"order=asc&limit=2", "a b +"},
		{"order=asc&limit=2&after=b", "c d"},
		{"limit=3&after=d", "c b a"},
		{"after=a", ""},
		{"name=x", "!name"},
		{"limit=0", "!limit"},
		{"limit=101", "!limit"},
		{"limit=two", "!limit"},
		{"order=up", "!order"},
		{"after=zz", "!after"},
		{"limit=1&limit=2", "!limit"},
	}
	for _, c := range cases {
		q, _ := url.ParseQuery(c.query)
		p, err := parseList(q, false)
		var got []string
		var more bool
		if err == nil {
			got, more, err = page(items, id, p)
		}
		s := strings.Join(got, " ")
		if more {
			s += " +"
		}
		var fe *fieldError
		if errors.As(err, &fe) {
			s = "!" + fe.param
		} else if err != nil {
			s = err.Error()
		}
		if s != c.want {
			t.Errorf("%q: got %q, want %q", c.query, s, c.want)
		}
	}
}

func TestFileIDsAndUploadNames(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"/home/workspace/a.txt", "/home/workspace/dir/sub/ü b.csv"} {
		got, ok := filePath(fileID(p))
		if !ok || got != p {
			t.Errorf("%s: round trip %q %v", p, got, ok)
		}
	}
	for _, id := range []string{"", "cfile_", "file-abc", "cfile_!!", "cfile_AA"} { // "AA" is a NUL byte
		if p, ok := filePath(id); ok {
			t.Errorf("%q names %q", id, p)
		}
	}
	for _, name := range []string{"", ".", "..", "../x", "a/b", `a\b`, "a\x00b", strings.Repeat("x", 256)} {
		if p, err := uploadPath(name); err == nil {
			t.Errorf("upload name %q accepted as %s", name, p)
		}
	}
	if p, err := uploadPath("report 2024.csv"); err != nil || p != "/home/workspace/report 2024.csv" {
		t.Errorf("plain name: %q %v", p, err)
	}
}
