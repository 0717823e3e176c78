package files_test

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/workspace/files"
)

// TestNarrowedQuota: a flush may commit under a quota smaller than the
// service's (its sandbox's gateway allows less), never a larger one.
func TestNarrowedQuota(t *testing.T) {
	forEachStore(t, files.Config{QuotaBytes: 1000, QuotaFiles: 10}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "narrow")
		commit := func(bytes, nfiles int64, paths ...string) error {
			t.Helper()
			f := s.BeginFlush(w)
			defer f.Abort(t.Context())
			f.Narrow(bytes, nfiles)
			for _, p := range paths {
				if err := f.Put(t.Context(), files.Entry{Path: p, Type: files.File}, strings.NewReader(strings.Repeat("x", 300))); err != nil {
					return err
				}
			}
			_, err := f.Commit(t.Context())
			return err
		}
		wantQuota(t, "300 bytes under a quota of 200", commit(200, 0, "/a"))
		wantQuota(t, "two files under a quota of one", commit(0, 1, "/a", "/b"))
		wantQuota(t, "a wider quota than the service's", commit(5000, 100, "/a", "/b", "/c", "/d"))
		if err := commit(600, 2, "/a", "/b"); err != nil {
			t.Fatalf("within the narrowed quota: %v", err)
		}
		if u, err := s.Usage(t.Context(), w); err != nil || u.QuotaBytes != 1000 {
			t.Fatalf("usage = %+v, %v; a flush's quota is its own", u, err)
		}
	})
}

// TestStaleRemovalKept: a sandbox's removal of a file it synced keeps
// what replaced the file since (e.g. an upload under the same name) and
// reports it; a removal of what the sandbox saw still goes. Both the
// one-stat-per-key path and the whole-listing path (more than 16
// operations) are checked.
func TestStaleRemovalKept(t *testing.T) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		for _, extra := range []int{0, 20} {
			t.Run(fmt.Sprintf("%d more ops", extra), func(t *testing.T) {
				w := ws(t, "acme", fmt.Sprintf("stale%d", extra))
				old := write(t, s, w, "/d/replaced", "old")
				seen := write(t, s, w, "/d/seen", "seen")
				gone := write(t, s, w, "/nowdir", "a file")
				// After the sandbox synced: replaced under the same name,
				// and a file turned into a directory.
				write(t, s, w, "/d/replaced", "new")
				if _, err := s.Delete(t.Context(), w, "/nowdir", false); err != nil {
					t.Fatal(err)
				}
				write(t, s, w, "/nowdir/inside", "x")

				f := s.BeginFlush(w)
				defer f.Abort(t.Context())
				f.ExactRemovals()
				for i := range extra {
					if err := f.Put(t.Context(), files.Entry{Path: fmt.Sprintf("/x/%d", i), Type: files.File}, strings.NewReader("x")); err != nil {
						t.Fatal(err)
					}
				}
				for _, r := range []struct {
					p    string
					had  files.Type
					etag string
				}{{"/d/replaced", files.File, old.ETag}, {"/d/seen", files.File, seen.ETag}, {"/d", files.Dir, ""}, {"/nowdir", files.File, gone.ETag}} {
					if err := f.RemoveSynced(r.p, r.had, r.etag); err != nil {
						t.Fatal(err)
					}
				}
				res, err := f.Commit(t.Context())
				if err != nil {
					t.Fatalf("flush: %v", err)
				}
				// /d is kept only for what is reported below it.
				want := []files.Conflict{{Path: "/d/replaced", Reason: files.ChangedSince}, {Path: "/nowdir", Reason: files.ChangedSince}}
				if fmt.Sprint(res.Conflicts) != fmt.Sprint(want) {
					t.Errorf("conflicts = %v, want %v", res.Conflicts, want)
				}
				if got := read(t, s, w, "/d/replaced"); got != "new" {
					t.Errorf("the replaced file holds %q, want the new content", got)
				}
				if got := read(t, s, w, "/nowdir/inside"); got != "x" {
					t.Errorf("the directory that took the file's place holds %q", got)
				}
				if got := names(t, s, w, "/d"); fmt.Sprint(got) != "[replaced]" {
					t.Errorf("/d holds %v, want only the replaced file", got)
				}
			})
		}
	})
}

// TestRemovalOfOwnFile: a removal naming the etag the sandbox sent
// removes the file: it is still the one the sandbox saw.
func TestRemovalOfOwnFile(t *testing.T) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "own")
		e := write(t, s, w, "/f", "mine")
		f := s.BeginFlush(w)
		defer f.Abort(t.Context())
		f.ExactRemovals()
		if err := f.RemoveSynced("/f", files.File, e.ETag); err != nil {
			t.Fatal(err)
		}
		res, err := f.Commit(t.Context())
		if err != nil || len(res.Conflicts) != 0 {
			t.Fatalf("flush = %+v, %v", res, err)
		}
		if got := names(t, s, w, "/"); len(got) != 0 {
			t.Fatalf("after the removal: %v", got)
		}
	})
}

// before is an entry the workspace holds before a flush: a file with
// content, a directory, or a link (written by an earlier flush).
type before struct {
	path, content string
	dir           bool
	link          string
}

// step is one operation of a flush: an entry to put, or a removal of
// what the sender last synced (had, and for a file the content it saw).
type step struct {
	put     files.Entry
	content string
	remove  string
	had     files.Type
	saw     string
}

func putDir(p string) step { return step{put: files.Entry{Path: p, Type: files.Dir}} }
func putFile(p, content string) step {
	return step{put: files.Entry{Path: p, Type: files.File}, content: content}
}

// asideName is an entry moved aside at a flush's time, with the -n a
// taken name adds.
var asideName = regexp.MustCompile(`^(.*)\.conflict-\d{8}T\d{6}Z(-\d+)?$`)

// conflictCase is a flush against a workspace that changed since the
// sender loaded it.
type conflictCase struct {
	name   string
	before []before
	steps  []step
	// want is every file and link after the flush, path → content or
	// "-> target"; <aside> stands for the name the conflict reports.
	want map[string]string
	// conflict is the one path reported; kind is what was moved aside,
	// "" for a removal kept as changed since.
	conflict, kind string
}

// checkConflicts runs each case on each store, with the flush writing a
// file of its own (/other) that is always saved, on the one-stat-per-key
// path and on the whole-listing path (more than 16 operations) alike,
// and checks the files, the conflict reported and the recorded usage.
func checkConflicts(t *testing.T, user string, tests []conflictCase) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		for i, tt := range tests {
			for _, extra := range []int{0, 20} {
				t.Run(fmt.Sprintf("%s/%d more ops", tt.name, extra), func(t *testing.T) {
					w := ws(t, "acme", fmt.Sprintf("%s%d-%d", user, i, extra))
					for _, b := range tt.before {
						switch {
						case b.dir:
							if _, err := s.Mkdir(t.Context(), w, b.path); err != nil {
								t.Fatal(err)
							}
						case b.link != "":
							if _, err := flush(t, s, w, flushOp{e: files.Entry{Path: b.path, Type: files.Symlink, LinkTarget: b.link}}); err != nil {
								t.Fatal(err)
							}
						default:
							write(t, s, w, b.path, b.content)
						}
					}
					f := s.BeginFlush(w)
					defer f.Abort(t.Context())
					f.ExactRemovals()
					steps := append(slices.Clone(tt.steps), putFile("/other", "other"))
					for j := range extra {
						steps = append(steps, putFile(fmt.Sprintf("/x/%d", j), "x"))
					}
					for _, st := range steps {
						var err error
						if st.remove != "" {
							saw := ""
							if st.saw != "" {
								saw = etag([]byte(st.saw))
							}
							err = f.RemoveSynced(st.remove, st.had, saw)
						} else {
							err = f.Put(t.Context(), st.put, strings.NewReader(st.content))
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					res, err := f.Commit(t.Context())
					if err != nil {
						t.Fatalf("flush: %v", err)
					}
					if len(res.Conflicts) != 1 || res.Conflicts[0].Path != tt.conflict {
						t.Fatalf("conflicts = %q, want one at %s", res.Conflicts, tt.conflict)
					}
					aside := ""
					if reason := res.Conflicts[0].Reason; tt.kind == "" {
						if reason != files.ChangedSince {
							t.Errorf("reason = %q, want %q", reason, files.ChangedSince)
						}
					} else {
						prefix := "the " + tt.kind + " written here in the workspace since this sandbox loaded it, as "
						var ok bool
						if aside, ok = strings.CutPrefix(reason, prefix); !ok {
							t.Fatalf("reason = %q, want it to start %q", reason, prefix)
						}
						m := asideName.FindStringSubmatch(aside)
						old := tt.conflict[strings.LastIndexByte(tt.conflict, '/')+1:]
						if m == nil || !strings.HasPrefix(old, m[1]) || len(aside) > files.MaxNameLen || !utf8.ValidString(aside) {
							t.Fatalf("moved aside as %q, want %s.conflict-<time> in at most %d bytes", aside, old, files.MaxNameLen)
						}
					}
					want := map[string]string{"/other": "other"}
					for p, c := range tt.want {
						want[strings.Replace(p, "<aside>", aside, 1)] = c
					}
					for j := range extra {
						want[fmt.Sprintf("/x/%d", j)] = "x"
					}
					h := hydrate(t, s, w, nil)
					got := map[string]string{}
					var bytes int64
					for p, e := range h.entries {
						switch e.Type {
						case files.File:
							got[p] = string(h.content[p])
							bytes += e.Size
						case files.Symlink:
							got[p] = "-> " + e.LinkTarget
						}
					}
					if !maps.Equal(got, want) {
						t.Errorf("files after the flush:\n got %q\nwant %q", got, want)
					}
					u, err := s.Usage(t.Context(), w)
					if err != nil || u.Bytes != bytes || u.Files != int64(len(h.entries)) {
						t.Errorf("usage = %+v, %v; the workspace holds %d bytes in %d entries", u, err, bytes, len(h.entries))
					}
				})
			}
		}
	})
}

// TestRemovalKeepsAnotherKind: a removal names the kind of entry the
// sender had, so an entry of another kind written there since (a file
// where the sender had a directory or a link, a directory where it had
// a file) is kept and reported rather than deleted with the sender's.
func TestRemovalKeepsAnotherKind(t *testing.T) {
	checkConflicts(t, "kind", []conflictCase{
		{
			name:     "the sender's directory, a file written there since",
			before:   []before{{path: "/d", content: "api"}},
			steps:    []step{{remove: "/d", had: files.Dir}},
			want:     map[string]string{"/d": "api"},
			conflict: "/d",
		},
		{
			name:     "the sender's link, a file written there since",
			before:   []before{{path: "/l", content: "api"}},
			steps:    []step{{remove: "/l", had: files.Symlink}},
			want:     map[string]string{"/l": "api"},
			conflict: "/l",
		},
		{
			name:     "the sender's file, a directory written there since",
			before:   []before{{path: "/f/x", content: "api"}},
			steps:    []step{{remove: "/f", had: files.File, saw: "shell"}},
			want:     map[string]string{"/f/x": "api"},
			conflict: "/f",
		},
	})
}

// TestMoveAside is the rule of a flush against a workspace that holds
// another kind of entry where the flush writes (a file or link where it
// writes a directory or below it, a directory where it writes a file or
// link, a file where it writes a link or the reverse), written since the
// sender loaded the workspace: the flush's entry takes the path, the
// other is kept beside it as <name>.conflict-<time> and reported, and
// nothing of either side is lost. A conflict never stops the rest of the
// flush.
func TestMoveAside(t *testing.T) {
	long := strings.Repeat("n", files.MaxNameLen)
	accents := strings.Repeat("é", files.MaxNameLen/2)
	checkConflicts(t, "aside", []conflictCase{
		{
			name:     "directory where the workspace has a file",
			before:   []before{{path: "/d", content: "api"}},
			steps:    []step{putDir("/d"), putFile("/d/inside", "shell")},
			want:     map[string]string{"/d/inside": "shell", "/<aside>": "api"},
			conflict: "/d", kind: "file",
		},
		{
			name:     "file where the workspace has a directory",
			before:   []before{{path: "/d/inside", content: "api"}},
			steps:    []step{putFile("/d", "shell")},
			want:     map[string]string{"/d": "shell", "/<aside>/inside": "api"},
			conflict: "/d", kind: "directory",
		},
		{
			name:     "file where the workspace has an empty directory",
			before:   []before{{path: "/d", dir: true}},
			steps:    []step{putFile("/d", "shell")},
			want:     map[string]string{"/d": "shell"},
			conflict: "/d", kind: "directory",
		},
		{
			name:     "link where the workspace has a directory",
			before:   []before{{path: "/l/inside", content: "api"}},
			steps:    []step{{put: files.Entry{Path: "/l", Type: files.Symlink, LinkTarget: "target"}}},
			want:     map[string]string{"/l": "-> target", "/<aside>/inside": "api"},
			conflict: "/l", kind: "directory",
		},
		{
			name:     "link where the workspace has a file",
			before:   []before{{path: "/l", content: "api"}},
			steps:    []step{{put: files.Entry{Path: "/l", Type: files.Symlink, LinkTarget: "target"}}},
			want:     map[string]string{"/l": "-> target", "/<aside>": "api"},
			conflict: "/l", kind: "file",
		},
		{
			name:     "file where the workspace has a link",
			before:   []before{{path: "/l", link: "elsewhere"}},
			steps:    []step{putFile("/l", "shell")},
			want:     map[string]string{"/l": "shell", "/<aside>": "-> elsewhere"},
			conflict: "/l", kind: "symbolic link",
		},
		{
			name:     "file below a file of the workspace",
			before:   []before{{path: "/d", content: "api"}},
			steps:    []step{putFile("/d/x", "shell")},
			want:     map[string]string{"/d/x": "shell", "/<aside>": "api"},
			conflict: "/d", kind: "file",
		},
		{
			name:     "directory below a file of the workspace, deep",
			before:   []before{{path: "/a/b", content: "api"}, {path: "/a/c", content: "kept"}},
			steps:    []step{putDir("/a/b/c"), putFile("/a/b/c/x", "shell")},
			want:     map[string]string{"/a/b/c/x": "shell", "/a/<aside>": "api", "/a/c": "kept"},
			conflict: "/a/b", kind: "file",
		},
		{
			name: "rm -rf of a directory that gained an entry, then a file there",
			before: []before{
				{path: "/d/seen", content: "seen"}, {path: "/d/new", content: "api"},
			},
			steps: []step{
				{remove: "/d/seen", had: files.File, saw: "seen"}, {remove: "/d", had: files.Dir}, putFile("/d", "shell"),
			},
			// One line for /d: the directory moved aside, not also
			// "changed since" for the removal it kept.
			want:     map[string]string{"/d": "shell", "/<aside>/new": "api"},
			conflict: "/d", kind: "directory",
		},
		{
			name:     "a name too long for its suffix is shortened",
			before:   []before{{path: "/" + long, content: "api"}},
			steps:    []step{putDir("/" + long)},
			want:     map[string]string{"/<aside>": "api"},
			conflict: "/" + long, kind: "file",
		},
		{
			name:     "a name is shortened between characters",
			before:   []before{{path: "/" + accents + "/x", content: "api"}},
			steps:    []step{putFile("/"+accents, "shell")},
			want:     map[string]string{"/" + accents: "shell", "/<aside>/x": "api"},
			conflict: "/" + accents, kind: "directory",
		},
	})
}

// TestMoveAsideNameTaken: an entry is moved aside under a name nothing
// takes, <name>.conflict-<time>-2 when <name>.conflict-<time> is taken,
// and what took it stays as it was.
func TestMoveAsideNameTaken(t *testing.T) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "taken")
		write(t, s, w, "/d", "api")
		// Every name the flush below may pick first, a second either way.
		now := time.Now().UTC().Truncate(time.Second)
		for i := -1; i <= 10; i++ {
			write(t, s, w, "/d.conflict-"+now.Add(time.Duration(i)*time.Second).Format("20060102T150405Z"), "taken")
		}
		f := s.BeginFlush(w)
		defer f.Abort(t.Context())
		if err := f.Put(t.Context(), files.Entry{Path: "/d", Type: files.Dir}, strings.NewReader("")); err != nil {
			t.Fatal(err)
		}
		res, err := f.Commit(t.Context())
		if err != nil || len(res.Conflicts) != 1 {
			t.Fatalf("flush = %+v, %v", res, err)
		}
		_, aside, _ := strings.Cut(res.Conflicts[0].Reason, ", as ")
		if m := asideName.FindStringSubmatch(aside); m == nil || m[2] != "-2" {
			t.Fatalf("moved aside as %q, want d.conflict-<time>-2", aside)
		}
		if got := read(t, s, w, "/"+aside); got != "api" {
			t.Errorf("%s holds %q, want the file moved aside", aside, got)
		}
		for _, name := range names(t, s, w, "/") {
			if name != "d/" && name != aside && read(t, s, w, "/"+name) != "taken" {
				t.Errorf("%s changed", name)
			}
		}
	})
}

// TestMoveAsideRaces interleaves writes through the file API with
// sandbox flushes writing the other kind of entry at the same paths,
// both orders, in many rounds. No flush fails, every write that was
// acknowledged is found in the workspace once (a file API write refused
// because a directory was already there was not acknowledged), and the
// recorded usage is what is stored. Run with -race.
func TestMoveAsideRaces(t *testing.T) {
	const rounds = 24
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "races")
		var mu sync.Mutex
		acked := map[string]bool{} // content of every acknowledged write
		ack := func(content string) {
			mu.Lock()
			acked[content] = true
			mu.Unlock()
		}
		var wg sync.WaitGroup
		for r := range rounds {
			p := fmt.Sprintf("/r%d", r)
			api, shell := fmt.Sprintf("api %d", r), fmt.Sprintf("shell %d", r)
			// Even rounds: a file through the API, a directory from the
			// sandbox; odd rounds: the reverse.
			apiPath, steps := p, []step{putDir(p), putFile(p+"/f", shell)}
			if r%2 == 1 {
				apiPath, steps = p+"/f", []step{putFile(p, shell)}
			}
			wg.Go(func() {
				_, err := s.Write(t.Context(), w, apiPath, strings.NewReader(api), files.WriteOptions{Size: -1})
				switch {
				case err == nil:
					ack(api)
				case errs.KindOf(err) != errs.FailedPrecondition:
					t.Errorf("write %s: %v", apiPath, err)
				}
			})
			wg.Go(func() {
				f := s.BeginFlush(w)
				defer f.Abort(t.Context())
				f.ExactRemovals()
				other := fmt.Sprintf("other %d", r)
				for _, st := range append(steps, putFile(fmt.Sprintf("/other%d", r), other)) {
					if err := f.Put(t.Context(), st.put, strings.NewReader(st.content)); err != nil {
						t.Errorf("flush %s: %v", p, err)
						return
					}
				}
				if _, err := f.Commit(t.Context()); err != nil {
					t.Errorf("flush %s: %v", p, err)
					return
				}
				ack(shell)
				ack(other)
			})
		}
		wg.Wait()
		h := hydrate(t, s, w, nil)
		found := map[string]int{}
		var bytes int64
		for p, e := range h.entries {
			if e.Type == files.File {
				found[string(h.content[p])]++
				bytes += e.Size
			}
		}
		for c := range acked {
			if found[c] != 1 {
				t.Errorf("%q is stored %d times, want once", c, found[c])
			}
		}
		if len(found) != len(acked) {
			t.Errorf("the workspace holds %d contents, %d were acknowledged", len(found), len(acked))
		}
		u, err := s.Usage(t.Context(), w)
		if err != nil || u.Bytes != bytes || u.Files != int64(len(h.entries)) {
			t.Errorf("usage = %+v, %v; the workspace holds %d bytes in %d entries", u, err, bytes, len(h.entries))
		}
	})
}
