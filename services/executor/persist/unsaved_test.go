package persist

import (
	"fmt"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/executor/wsync"
	"github.com/conch-sh/conch/services/workspace/files"
)

func TestLeaveUnstorable(t *testing.T) {
	t.Parallel()
	ws := files.Workspace{Account: "acct", User: "alice"}
	scan := map[string]wsync.Meta{}
	tests := []struct {
		name, path string
		meta       wsync.Meta
		reason     string // "" when it is saved
	}{
		{"plain", "/a.txt", wsync.Meta{}, ""},
		{"255-byte name", "/" + strings.Repeat("n", 255), wsync.Meta{}, ""},
		{"three dots", "/...", wsync.Meta{}, ""},
		{"not UTF-8", "/bad\xff", wsync.Meta{}, "not valid UTF-8"},
		{"newline", "/a\nb", wsync.Meta{}, "control character"},
		{"backslash", "/a\\b", wsync.Meta{}, "reads like a path separator"},
		{"parent once trimmed", "/.. ", wsync.Meta{}, `reads as "." or ".."`},
		{"longer than the store keys", "/" + strings.Repeat(strings.Repeat("d", 250)+"/", 4) + "f", wsync.Meta{}, "too long for the object store"},
		{"long link target", "/l", wsync.Meta{Type: wsync.Symlink, Target: strings.Repeat("t", files.MaxLinkLen+1)}, "symlink target longer than"},
	}
	var changed []string
	for _, tc := range tests {
		scan[tc.path] = tc.meta
		changed = append(changed, tc.path)
	}
	c := wsync.Changes{Changed: changed, Removed: []string{"/gone", "/gone\xff"}}
	notes := leaveUnstorable(ws, &c, scan)
	got := map[string]string{}
	for _, n := range notes {
		got[n.path] = n.Reason
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			why, left := got[tc.path]
			saved := strings.Contains(strings.Join(c.Changed, "\x00")+"\x00", tc.path+"\x00")
			switch {
			case tc.reason == "" && (left || !saved):
				t.Errorf("%q left out (%q), want it saved", tc.path, why)
			case tc.reason != "" && (saved || !strings.Contains(why, tc.reason)):
				t.Errorf("%q: saved %v, reason %q; want it left out saying %q", tc.path, saved, why, tc.reason)
			}
		})
	}
	if fmt.Sprint(c.Removed) != "[/gone]" {
		t.Errorf("removed = %q, want only the storable path", c.Removed)
	}
}

func TestUnsavedPaths(t *testing.T) {
	t.Parallel()
	var u unsavedPaths
	scan := map[string]wsync.Meta{}
	var notes []Unsaved
	for i := range MaxUnsavedShown + 5 {
		p := fmt.Sprintf("/bad%03d\xff", i)
		scan[p] = wsync.Meta{}
		notes = append(notes, Unsaved{path: p, Reason: "not valid UTF-8"})
	}
	u.note(notes)
	shown, more := u.list(MaxUnsavedShown)
	if len(shown) != MaxUnsavedShown || more != 5 {
		t.Fatalf("list = %d shown, %d more; want %d and 5", len(shown), more, MaxUnsavedShown)
	}
	if d := shown[0].Display(); d != `/home/workspace/bad000\xff` {
		t.Errorf("display = %q", d)
	}
	// Saved (a link made short again) or gone: no longer listed.
	delete(scan, "/bad001\xff")
	u.forget([]string{"/bad000\xff"}, scan)
	shown, more = u.list(MaxUnsavedShown)
	if shown[0].path != "/bad002\xff" || len(shown)+more != MaxUnsavedShown+3 {
		t.Errorf("after forget: first %q, %d in all", shown[0].path, len(shown)+more)
	}
	u.forget(nil, map[string]wsync.Meta{})
	if shown, more = u.list(MaxUnsavedShown); len(shown) != 0 || more != 0 {
		t.Errorf("after every path went: %d shown, %d more", len(shown), more)
	}
}
