package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/internal/display"
)

// Watch is the agent's file watcher (wire.WatchCommand), a process of its
// own in the sandbox, as its user: it watches a directory, and with -r
// every directory below it, with inotify, and writes each change to out
// as a line of JSON (wire.WatchEvent) until it is killed. It is bounded:
// WatchMaxDirs directories, and per WatchWindow at most WatchMaxEvents
// events, the same path's changes of one kind told once; what is left
// out is counted in a "coalesced" event, and a kernel queue that
// overflowed is told as one too.
func Watch(args []string, out io.Writer) error { return watch(args, out, nil) }

// watch is Watch until stop is closed.
func watch(args []string, out io.Writer, stop <-chan struct{}) error {
	recursive := false
	if len(args) > 0 && args[0] == "-r" {
		recursive, args = true, args[1:]
	}
	if len(args) != 2 || args[0] != "--" || !filepath.IsAbs(args[1]) {
		return errors.New("usage: " + wire.WatchCommand + " [-r] -- /absolute/dir")
	}
	root := filepath.Clean(args[1])
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer unix.Close(fd)
	w := &watcher{fd: fd, dirs: map[int32]string{}, recursive: recursive, out: bufio.NewWriter(out)}
	if err := w.add(root); err != nil {
		return fmt.Errorf("watch %s: %w", root, err)
	}
	if recursive {
		w.addBelow(root)
	}
	// The watch holds: the host may start reading events.
	w.emit(wire.WatchEvent{Op: wire.WatchReady, Path: display.Escape(root)})
	if err := w.flush(); err != nil {
		return err
	}
	return w.loop(stop)
}

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW | unix.IN_EXCL_UNLINK

type watcher struct {
	fd        int
	dirs      map[int32]string // watch descriptor → directory
	recursive bool
	out       *bufio.Writer

	pending []wire.WatchEvent // paths escaped (display.Escape)
	seen    map[wire.WatchEvent]bool
	dropped int
	err     error
}

// add watches one directory; beyond WatchMaxDirs it counts what is left
// out.
func (w *watcher) add(dir string) error {
	if len(w.dirs) >= wire.WatchMaxDirs {
		w.dropped++
		return nil
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, watchMask)
	if err != nil {
		return err
	}
	w.dirs[int32(wd)] = dir
	return nil
}

// addBelow watches every directory under dir, links not followed. Each
// is watched before it is listed, so nothing made in it afterwards is
// missed.
func (w *watcher) addBelow(dir string) {
	w.walk(dir, false)
}

// addNew watches a directory that appeared while the watch ran (made or
// moved in), and every one under it: what they held before their
// watches were added is told as created, as nothing else would tell it
// (a path may then be told twice).
func (w *watcher) addNew(dir string) {
	_ = w.add(dir)
	w.walk(dir, true)
}

func (w *watcher) walk(dir string, tell bool) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil // gone or unreadable: nothing to watch there
		}
		if d.IsDir() {
			_ = w.add(p)
		}
		if tell {
			w.emit(wire.WatchEvent{Op: wire.WatchCreate, Path: display.Escape(p)})
		}
		return nil
	})
}

// loop reads events and writes them a window at a time.
func (w *watcher) loop(stop <-chan struct{}) error {
	buf := make([]byte, 64<<10)
	events := make(chan []byte)
	errc := make(chan error, 1)
	go func() {
		for {
			n, err := unix.Read(w.fd, buf)
			if err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				errc <- err
				return
			}
			b := make([]byte, n)
			copy(b, buf[:n])
			select {
			case events <- b:
			case <-stop:
				return
			}
		}
	}()
	tick := time.NewTicker(wire.WatchWindow)
	defer tick.Stop()
	for {
		select {
		case b := <-events:
			w.parse(b)
		case err := <-errc:
			return fmt.Errorf("watch: %w", err)
		case <-tick.C:
			if err := w.flush(); err != nil {
				return err
			}
		case <-stop:
			return nil
		}
	}
}

// parse turns inotify's records into events, for the window.
func (w *watcher) parse(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		b = b[end:]
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			w.emit(wire.WatchEvent{Op: wire.WatchCoalesced, Overflow: true})
			continue
		}
		dir, ok := w.dirs[ev.Wd]
		if !ok {
			continue
		}
		if ev.Mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, ev.Wd)
			continue
		}
		p := dir
		if name != "" {
			p = filepath.Join(dir, name)
		}
		shown := display.Escape(p)
		switch {
		case ev.Mask&unix.IN_CREATE != 0:
			w.emit(wire.WatchEvent{Op: wire.WatchCreate, Path: shown})
			if ev.Mask&unix.IN_ISDIR != 0 && w.recursive {
				w.addNew(p)
			}
		case ev.Mask&unix.IN_MODIFY != 0:
			w.emit(wire.WatchEvent{Op: wire.WatchWrite, Path: shown})
		case ev.Mask&(unix.IN_DELETE|unix.IN_DELETE_SELF) != 0:
			w.emit(wire.WatchEvent{Op: wire.WatchRemove, Path: shown})
		case ev.Mask&(unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_MOVE_SELF) != 0:
			w.emit(wire.WatchEvent{Op: wire.WatchRename, Path: shown})
			if ev.Mask&unix.IN_MOVED_TO != 0 && ev.Mask&unix.IN_ISDIR != 0 && w.recursive {
				w.addNew(p)
			}
		}
	}
}

// emit queues an event for the window: once per path and kind, and no
// more than WatchMaxEvents.
func (w *watcher) emit(e wire.WatchEvent) {
	if e.Op == wire.WatchCoalesced {
		w.dropped++
		return
	}
	if w.seen == nil {
		w.seen = map[wire.WatchEvent]bool{}
	}
	if w.seen[e] {
		return
	}
	if len(w.pending) >= wire.WatchMaxEvents {
		w.dropped++
		return
	}
	w.seen[e] = true
	w.pending = append(w.pending, e)
}

// flush writes the window's events, and how many were left out.
func (w *watcher) flush() error {
	enc := json.NewEncoder(w.out)
	for _, e := range w.pending {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	if w.dropped > 0 {
		if err := enc.Encode(wire.WatchEvent{Op: wire.WatchCoalesced, Dropped: w.dropped}); err != nil {
			return err
		}
	}
	w.pending, w.dropped = w.pending[:0], 0
	clear(w.seen)
	return w.out.Flush()
}

// RunWatch runs Watch as the process's command, for the binaries that
// serve as the agent.
func RunWatch(args []string) error {
	return Watch(args, os.Stdout)
}

// Serve runs what a binary serving as the agent is asked to by its
// arguments (args[0] the subcommand): the resident agent
// (wire.AgentCommand) or a file watch (wire.WatchCommand). It reports
// false for anything else.
func Serve(args []string) (bool, error) {
	switch {
	case len(args) == 1 && args[0] == wire.AgentCommand:
		return true, Run()
	case len(args) > 0 && args[0] == wire.WatchCommand:
		return true, RunWatch(args[1:])
	}
	return false, nil
}
