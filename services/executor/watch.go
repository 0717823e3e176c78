package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/shellquote"
)

// watchQueue is how many events wait for a slow client; beyond, they are
// counted as dropped, never held up in the sandbox's one stream of
// frames, which every process of it shares.
const watchQueue = 256

// WatchFiles streams the changes under dir ("" is the workspace) in
// account's sandbox id to send, from the agent's watcher run as a process
// of the sandbox's user, until ctx ends or the sandbox does. Its lines are
// the sandbox's, and read as untrusted: one that is not a watch event
// ends the watch.
func (s *Service) WatchFiles(ctx context.Context, account, id, dir string, recursive bool, send func(wire.WatchEvent) error) error {
	e, err := s.lookup(ctx, account, id)
	if err != nil {
		return err
	}
	if dir == "" {
		dir = wire.WorkspaceDir
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || len(dir) > 4096 || !utf8.ValidString(dir) || strings.ContainsRune(dir, 0) {
		return errs.Invalid("path", "must be a clean absolute directory of the sandbox, at most 4096 bytes of UTF-8")
	}
	cmd := "exec " + wire.AgentPath + " " + wire.WatchCommand
	if recursive {
		cmd += " -r"
	}
	cmd += " -- " + shellquote.Quote(dir)

	var (
		mu      sync.Mutex
		line    []byte
		broken  error
		dropped int
	)
	events := make(chan wire.WatchEvent, watchQueue)
	stderr := head(1 << 10)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := e.sb.Start(sandbox.Options{
		Command: cmd, Workdir: "/", Budget: -1,
		OnOutput: func(st sandbox.Stream, b []byte) {
			if st == sandbox.Stderr {
				stderr.write(b)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for len(b) > 0 && broken == nil {
				i := bytes.IndexByte(b, '\n')
				if i < 0 {
					line = append(line, b...)
					if len(line) > wire.WatchMaxLine {
						broken = errs.New(errs.Internal, "the sandbox's watcher wrote a line longer than %d bytes", wire.WatchMaxLine)
						cancel()
					}
					return
				}
				line = append(line, b[:i]...)
				b = b[i+1:]
				ev, err := parseWatchEvent(line)
				line = line[:0]
				if err != nil {
					broken = err
					cancel()
					return
				}
				select {
				case events <- ev:
				default:
					dropped++
				}
			}
		},
	})
	if err != nil {
		return err
	}
	defer func() { _ = p.Kill() }()
	ready := false
	for {
		select {
		case ev := <-events:
			if !ready && ev.Op != wire.WatchReady {
				return errs.New(errs.Internal, "the sandbox's watcher did not start with ready")
			}
			ready = true
			mu.Lock()
			n := dropped
			dropped = 0
			mu.Unlock()
			if n > 0 {
				if err := send(wire.WatchEvent{Op: wire.WatchCoalesced, Dropped: n}); err != nil {
					return err
				}
			}
			if err := send(ev); err != nil {
				return err
			}
		case <-p.Done():
			if !ready {
				msg := strings.TrimSpace(stderr.String())
				if msg == "" {
					msg = "the watch ended before it started"
				}
				return errs.New(errs.FailedPrecondition, "%s", strings.TrimPrefix(msg, "watch "))
			}
			return nil
		case <-ctx.Done():
			mu.Lock()
			err := broken
			mu.Unlock()
			return err
		}
	}
}

// parseWatchEvent reads one line of the watcher: an event of a known
// kind, its path absolute where it has one.
func parseWatchEvent(line []byte) (wire.WatchEvent, error) {
	var ev wire.WatchEvent
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil {
		return ev, errs.New(errs.Internal, "the sandbox's watcher wrote what is not an event")
	}
	switch ev.Op {
	case wire.WatchReady, wire.WatchCreate, wire.WatchWrite, wire.WatchRemove, wire.WatchRename:
		if !strings.HasPrefix(ev.Path, "/") || !utf8.ValidString(ev.Path) || ev.Dropped != 0 || ev.Overflow {
			return ev, errs.New(errs.Internal, "the sandbox's watcher wrote a %s event without a path", ev.Op)
		}
	case wire.WatchCoalesced:
		if ev.Path != "" || ev.Dropped < 0 || (ev.Dropped == 0 && !ev.Overflow) {
			return ev, errs.New(errs.Internal, "the sandbox's watcher wrote a coalesced event without a count")
		}
	default:
		return ev, errs.New(errs.Internal, "the sandbox's watcher wrote an event of no known kind")
	}
	return ev, nil
}
