package files_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/workspace/files"
)

// hydrated is what a hydration sent.
type hydrated struct {
	entries  map[string]files.Entry
	content  map[string][]byte // files whose bytes were sent
	removed  []string
	revision int64
}

func hydrate(t *testing.T, s *files.Service, w files.Workspace, have map[string]string) hydrated {
	t.Helper()
	h := hydrated{entries: map[string]files.Entry{}, content: map[string][]byte{}}
	var cur string
	ended := false
	err := s.Hydrate(t.Context(), w, have, func(m files.HydrateMsg) error {
		switch {
		case ended:
			t.Fatal("message after the end")
		case m.Entry != nil:
			cur = m.Entry.Path
			h.entries[cur] = *m.Entry
			if m.Entry.Type == files.File && have[cur] != m.Entry.ETag {
				h.content[cur] = []byte{}
			}
		case m.Data != nil:
			h.content[cur] = append(h.content[cur], m.Data...)
		case m.Removed != "":
			h.removed = append(h.removed, m.Removed)
		case m.End:
			ended, h.revision = true, m.Revision
		}
		return nil
	})
	if err != nil || !ended {
		t.Fatalf("hydrate: %v (ended %v)", err, ended)
	}
	return h
}

func etag(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

type flushOp struct {
	e       files.Entry
	content string
	remove  string
}

func flush(t *testing.T, s *files.Service, w files.Workspace, ops ...flushOp) (files.FlushResult, error) {
	t.Helper()
	f := s.BeginFlush(w)
	defer f.Abort(t.Context())
	for _, op := range ops {
		var err error
		if op.remove != "" {
			err = f.Remove(op.remove)
		} else {
			err = f.Put(t.Context(), op.e, strings.NewReader(op.content))
		}
		if err != nil {
			return files.FlushResult{}, err
		}
	}
	return f.Commit(t.Context())
}

func file(p, content string) flushOp {
	return flushOp{e: files.Entry{Path: p, Type: files.File, Mode: 0o640, ETag: etag([]byte(content))}, content: content}
}

func TestSync(t *testing.T) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "sandbox")
		large := bytes.Repeat([]byte("L"), 6<<20)
		res, err := flush(t, s, w,
			flushOp{e: files.Entry{Path: "/src", Type: files.Dir, Mode: 0o750}},
			file("/src/main.go", "package main\n"),
			file("/empty", ""),
			flushOp{e: files.Entry{Path: "/src/link", Type: files.Symlink, LinkTarget: "../../../etc/passwd"}},
			flushOp{e: files.Entry{Path: "/large", Type: files.File}, content: string(large)},
			flushOp{e: files.Entry{Path: "/emptydir", Type: files.Dir}},
		)
		if err != nil {
			t.Fatal(err)
		}
		if res.Revision != 1 || res.Files != 6 || res.Bytes != int64(len(large))+13 {
			t.Fatalf("flush result = %+v", res)
		}
		cold := hydrate(t, s, w, nil)
		if got := slices.Sorted(maps.Keys(cold.entries)); !slices.Equal(got, []string{"/empty", "/emptydir", "/large", "/src", "/src/link", "/src/main.go"}) {
			t.Fatalf("cold entries = %v", got)
		}
		if string(cold.content["/src/main.go"]) != "package main\n" || !bytes.Equal(cold.content["/large"], large) || len(cold.content["/empty"]) != 0 {
			t.Fatalf("cold content wrong: %d files", len(cold.content))
		}
		if l := cold.entries["/src/link"]; l.Type != files.Symlink || l.LinkTarget != "../../../etc/passwd" {
			t.Fatalf("link entry = %+v", l)
		}
		if d := cold.entries["/src"]; d.Type != files.Dir || d.Mode != 0o750 {
			t.Fatalf("dir entry = %+v", d)
		}
		if cold.revision != 1 {
			t.Fatalf("revision = %d", cold.revision)
		}
		// The link is a link: never followed, by reading it or through it.
		_, _, err = s.Open(t.Context(), w, "/src/link")
		wantKind(t, "open a link", err, errs.FailedPrecondition)
		_, _, err = s.Open(t.Context(), w, "/src/link/shadow")
		wantKind(t, "open through a link", err, errs.NotFound)

		have := map[string]string{}
		for p, e := range cold.entries {
			have[p] = e.ETag
		}
		warm := hydrate(t, s, w, have)
		if len(warm.content) != 0 || len(warm.removed) != 0 || len(warm.entries) != 6 {
			t.Fatalf("warm hydrate sent content of %v, removed %v", slices.Collect(maps.Keys(warm.content)), warm.removed)
		}

		if _, err := flush(t, s, w, file("/src/main.go", "package main // v2\n"), flushOp{remove: "/large"}, file("/new.txt", "new")); err != nil {
			t.Fatal(err)
		}
		next := hydrate(t, s, w, have)
		if got := slices.Sorted(maps.Keys(next.content)); !slices.Equal(got, []string{"/new.txt", "/src/main.go"}) {
			t.Fatalf("changed files sent = %v", got)
		}
		if !slices.Equal(next.removed, []string{"/large"}) || next.revision != 2 {
			t.Fatalf("removed = %v, revision %d", next.removed, next.revision)
		}

		// Refused flushes change nothing.
		bad := []struct {
			name string
			ops  []flushOp
			kind errs.Kind
		}{
			{"wrong etag", []flushOp{file("/ok", "x"), {e: files.Entry{Path: "/bad", Type: files.File, ETag: etag([]byte("y"))}, content: "z"}}, errs.InvalidArgument},
			// Against the workspace, these move what is in the way aside
			// (TestMoveAside); against the flush's own entries, they are
			// a sender contradicting itself.
			{"file over its own dir", []flushOp{file("/ok", "x"), {e: files.Entry{Path: "/d", Type: files.Dir}}, file("/d", "x")}, errs.FailedPrecondition},
			{"dir over its own file", []flushOp{file("/ok", "x"), file("/f", "x"), {e: files.Entry{Path: "/f", Type: files.Dir}}}, errs.FailedPrecondition},
			{"file under its own file", []flushOp{file("/ok", "x"), file("/f", "x"), file("/f/child", "x")}, errs.FailedPrecondition},
			{"traversal", []flushOp{file("/ok", "x"), file("/../escape", "x")}, errs.InvalidArgument},
			{"traversal in removal", []flushOp{file("/ok", "x"), {remove: "/src/../../other"}}, errs.InvalidArgument},
			{"no type", []flushOp{{e: files.Entry{Path: "/fifo"}}}, errs.InvalidArgument},
			{"link without target", []flushOp{{e: files.Entry{Path: "/l", Type: files.Symlink}}}, errs.InvalidArgument},
			{"link with NUL", []flushOp{{e: files.Entry{Path: "/l", Type: files.Symlink, LinkTarget: "a\x00b"}}}, errs.InvalidArgument},
		}
		before := hydrate(t, s, w, nil)
		for _, tt := range bad {
			_, err := flush(t, s, w, tt.ops...)
			wantKind(t, tt.name, err, tt.kind)
		}
		// An aborted flush (the stream dropped before commit) is not applied.
		f := s.BeginFlush(w)
		if err := f.Put(t.Context(), files.Entry{Path: "/aborted", Type: files.File}, bytes.NewReader(large)); err != nil {
			t.Fatal(err)
		}
		f.Abort(t.Context())
		after := hydrate(t, s, w, nil)
		if !maps.EqualFunc(before.entries, after.entries, func(a, b files.Entry) bool { return a.ETag == b.ETag && a.Type == b.Type }) || after.revision != before.revision {
			t.Fatalf("refused flushes changed the workspace: %v", slices.Sorted(maps.Keys(after.entries)))
		}
		// Replacing a directory by a file works when the removal comes first.
		if _, err := flush(t, s, w, flushOp{remove: "/src"}, file("/src", "now a file")); err != nil {
			t.Fatal(err)
		}
		if got := read(t, s, w, "/src"); got != "now a file" {
			t.Fatalf("content = %q", got)
		}
		u, err := s.Usage(t.Context(), w)
		if err != nil || u.Files != 4 {
			t.Fatalf("usage = %+v, %v; want 4 entries (/empty /emptydir /new.txt /src)", u, err)
		}
	})
}
