package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
)

// startWatch runs a watch of dir and returns its events as they come.
func startWatch(t *testing.T, dir string, recursive bool) <-chan wire.WatchEvent {
	t.Helper()
	pr, pw := io.Pipe()
	stop := make(chan struct{})
	args := []string{"--", dir}
	if recursive {
		args = append([]string{"-r"}, args...)
	}
	done := make(chan error, 1)
	go func() { done <- watch(args, pw, stop) }()
	t.Cleanup(func() {
		close(stop)
		pr.Close()
		<-done
	})
	events := make(chan wire.WatchEvent, 4096)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var e wire.WatchEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Errorf("line %q: %v", sc.Text(), err)
				return
			}
			events <- e
		}
	}()
	if e := next(t, events); e.Op != wire.WatchReady || e.Path != dir {
		t.Fatalf("first event %+v, want ready", e)
	}
	return events
}

func next(t *testing.T, events <-chan wire.WatchEvent) wire.WatchEvent {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event in 5s")
		return wire.WatchEvent{}
	}
}

// until collects events until one is want.
func until(t *testing.T, events <-chan wire.WatchEvent, want wire.WatchEvent) []wire.WatchEvent {
	t.Helper()
	var got []wire.WatchEvent
	for {
		e := next(t, events)
		got = append(got, e)
		if e == want {
			return got
		}
	}
}

func TestWatch(t *testing.T) {
	dir := t.TempDir()
	events := startWatch(t, dir, true)
	f := filepath.Join(dir, "a")
	for _, step := range []struct {
		name string
		do   func() error
		want wire.WatchEvent
	}{
		{"create", func() error { return os.WriteFile(f, nil, 0o600) }, wire.WatchEvent{Op: wire.WatchCreate, Path: f}},
		{"write", func() error { return os.WriteFile(f, []byte("x"), 0o600) }, wire.WatchEvent{Op: wire.WatchWrite, Path: f}},
		{"rename", func() error { return os.Rename(f, f+"2") }, wire.WatchEvent{Op: wire.WatchRename, Path: f + "2"}},
		{"remove", func() error { return os.Remove(f + "2") }, wire.WatchEvent{Op: wire.WatchRemove, Path: f + "2"}},
		{"a new directory", func() error { return os.Mkdir(filepath.Join(dir, "sub"), 0o700) }, wire.WatchEvent{Op: wire.WatchCreate, Path: filepath.Join(dir, "sub")}},
		// Watched once it exists: what is made in it is told.
		{"in the new directory", func() error { return os.WriteFile(filepath.Join(dir, "sub", "b"), nil, 0o600) }, wire.WatchEvent{Op: wire.WatchCreate, Path: filepath.Join(dir, "sub", "b")}},
		{"a name that is not UTF-8", func() error { return os.WriteFile(filepath.Join(dir, "bad\xff"), nil, 0o600) }, wire.WatchEvent{Op: wire.WatchCreate, Path: filepath.Join(dir, `bad\xff`)}},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		until(t, events, step.want)
	}

	// A flood: the same file written a thousand times is told at most
	// once a window; a thousand files, at most WatchMaxEvents a window,
	// the rest counted.
	g, err := os.Create(filepath.Join(dir, "g"))
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		_, _ = g.Write([]byte("x"))
	}
	g.Close()
	for i := range 1000 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writes, told, dropped := 0, 0, 0
	deadline := time.After(10 * time.Second)
	for told+dropped < 1000 {
		select {
		case e := <-events:
			switch {
			case e.Op == wire.WatchWrite && e.Path == filepath.Join(dir, "g"):
				writes++
			case e.Op == wire.WatchCreate && strings.HasPrefix(filepath.Base(e.Path), "f"):
				told++
			case e.Op == wire.WatchCoalesced:
				dropped += e.Dropped
			}
		case <-deadline:
			t.Fatalf("after 10s: %d told, %d dropped of 1000", told, dropped)
		}
	}
	if writes == 0 || writes > 50 {
		t.Errorf("1000 writes of one file told %d times, want a few", writes)
	}
	if told+dropped != 1000 {
		t.Errorf("%d told and %d dropped of 1000 creates", told, dropped)
	}
}

func TestWatchUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"rel"}, {"--", "rel"}, {"-r", "/x"}, {"--", "/nonexistent-dir-of-conch"}} {
		if err := Watch(args, io.Discard); err == nil {
			t.Errorf("Watch(%q) started", args)
		}
	}
}

// A directory made with files already in it before its watch is added
// (moved in whole, or filled at once) has them told: nothing is missed
// between its creation and its watch.
func TestWatchNewDirectoryContents(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	events := startWatch(t, dir, true)
	if err := os.MkdirAll(filepath.Join(outside, "moved", "deep"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "moved", "deep", "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(outside, "moved"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	until(t, events, wire.WatchEvent{Op: wire.WatchCreate, Path: filepath.Join(dir, "moved", "deep", "f")})
	// And it is watched: what is made in it later is told too.
	if err := os.WriteFile(filepath.Join(dir, "moved", "deep", "g"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	until(t, events, wire.WatchEvent{Op: wire.WatchCreate, Path: filepath.Join(dir, "moved", "deep", "g")})
}
