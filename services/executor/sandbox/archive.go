package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/internal/shellquote"
)

// An archive of a sandbox is a tar of what it may write: its workspace,
// /tmp and its image's workdir when that is writable on its own. The
// sandbox's own tar makes and restores it, as the sandbox's user inside
// the sandbox, so that an archive can neither read nor write anything
// the sandbox could not; the host only carries its bytes. TAR_OPTIONS,
// which a sandbox's environment could set, is cleared; GNU tar refuses
// members with ".." and strips a leading "/" besides.
const (
	archiveMembers = "home/workspace tmp"
	archiveCommand = "unset TAR_OPTIONS; LC_ALL=C exec /bin/tar --create --file=- " + tarRecords + " --format=posix --numeric-owner --sparse --directory=/ "
	restoreCommand = "unset TAR_OPTIONS; LC_ALL=C exec /bin/tar --extract --file=- " + tarRecords + " --read-full-records --no-same-owner --preserve-permissions --no-overwrite-dir --directory=/ "
	// tarRecords makes tar move 256 KiB at a time rather than its 10 KiB
	// default: a tenth of the writes, frames and hand-offs on the way.
	tarRecords = "--blocking-factor=512"
	// tarChanged is GNU tar's exit status when a file changed while it
	// read it: the archive is whole, with that file as tar found it.
	tarChanged = 1
	// restoreBlock is what one write to a restoring tar's pipe carries.
	restoreBlock = 256 << 10
	// tarStderr is how much of tar's complaint is kept.
	tarStderr = 4 << 10
)

// ArchiveError is tar's failure in a sandbox, in its own words: making an
// archive (Archive's stream fails with it) or, with Restore set,
// restoring one.
type ArchiveError struct {
	Msg     string
	Restore bool
}

func (e *ArchiveError) Error() string { return e.Msg }

// members are the directories an archive of s holds, relative to /. The
// workdir was checked when its template was made, and is quoted all the
// same.
func (s *Sandbox) members() string {
	m := archiveMembers
	if w := s.spec.Workdir; s.spec.Image != nil && OwnWorkdir(w) {
		m += " " + shellquote.Quote(strings.TrimPrefix(w, "/"))
	}
	return m
}

// Archive starts tar in the sandbox and returns the archive it writes, at
// the pace the caller reads it, straight from tar's stdout (Options.Pipe).
// The stream fails with an *ArchiveError when tar does, and with ctx's
// error when ctx ends first; closing it kills tar.
func (s *Sandbox) Archive(ctx context.Context) (io.ReadCloser, error) {
	stderr := new(firstBytes)
	p, err := s.Start(Options{
		Command: archiveCommand + s.members(), Workdir: "/", Budget: -1, Pipe: wire.PipeStdout,
		OnOutput: func(_ Stream, b []byte) { stderr.write(b) },
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: start archive: %w", err)
	}
	pipe, err := p.Pipe()
	if err != nil {
		_ = p.Kill()
		return nil, fmt.Errorf("sandbox: start archive: %w", err)
	}
	a := &archiveReader{f: pipe, p: p, ctx: ctx, stderr: stderr}
	a.stop = context.AfterFunc(ctx, func() {
		_ = p.Kill()
		_ = pipe.SetReadDeadline(time.Now())
	})
	return a, nil
}

// archiveReader is an archive's stream; closing it ends its tar.
type archiveReader struct {
	f      *os.File
	p      *Process
	ctx    context.Context
	stderr *firstBytes
	stop   func() bool
}

// Read reads tar's output; at its end, it waits for tar's exit and fails
// unless tar made the whole archive.
func (a *archiveReader) Read(b []byte) (int, error) {
	n, err := a.f.Read(b)
	if err == nil {
		return n, nil
	}
	if a.ctx.Err() != nil {
		return n, a.ctx.Err()
	}
	if err != io.EOF {
		return n, err
	}
	select {
	case <-a.p.Done():
	case <-a.ctx.Done():
		return n, a.ctx.Err()
	}
	if x := a.p.Exit(); x.Err != nil || (x.Code != 0 && x.Code != tarChanged) {
		return n, tarFailed(x, a.stderr.String(), false)
	}
	return n, io.EOF
}

func (a *archiveReader) Close() error {
	a.stop()
	_ = a.p.Kill()
	return a.f.Close()
}

// Restore runs tar in the sandbox on the archive r, written straight to
// tar's stdin (Options.Pipe) at the pace tar reads it. It returns ctx's
// error when ctx ends first; r's error when reading it fails (an
// *ArchiveError when r is an archive whose tar failed); an *ArchiveError
// with Restore set when this tar fails.
func (s *Sandbox) Restore(ctx context.Context, r io.Reader) error {
	var stderr firstBytes
	p, err := s.Start(Options{
		Command: restoreCommand + s.members(), Workdir: "/", Budget: -1, Pipe: wire.PipeStdin,
		OnOutput: func(_ Stream, b []byte) { stderr.write(b) },
	})
	if err != nil {
		return fmt.Errorf("sandbox: start restore: %w", err)
	}
	pipe, err := p.Pipe()
	if err != nil {
		_ = p.Kill()
		return fmt.Errorf("sandbox: start restore: %w", err)
	}
	stop := context.AfterFunc(ctx, func() {
		_ = p.Kill()
		_ = pipe.SetWriteDeadline(time.Now())
	})
	defer stop()
	buf := make([]byte, restoreBlock)
	var readErr, sendErr error
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, sendErr = pipe.Write(buf[:n]); sendErr != nil {
				break
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			readErr = rerr
			break
		}
	}
	pipe.Close()
	if readErr != nil {
		// A cut archive must not end as a whole one would.
		_ = p.Kill()
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		<-p.Done()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if readErr != nil {
		// The archive failed first: tar's complaint is only its end.
		return readErr
	}
	x := p.Exit()
	if x.Err == nil && x.Code == 0 {
		// tar may end before the last record's padding is written.
		if sendErr != nil && !errors.Is(sendErr, syscall.EPIPE) {
			return fmt.Errorf("sandbox: restore: %w", sendErr)
		}
		return nil
	}
	return tarFailed(x, stderr.String(), true)
}

// tarFailed says why tar failed.
func tarFailed(x Exit, stderr string, restore bool) *ArchiveError {
	msg := strings.TrimSpace(stderr)
	switch {
	case x.OOMKilled:
		msg = "tar ran out of the sandbox's memory"
	case x.Err != nil:
		msg = x.Err.Error()
	case x.Code == 127:
		msg = "the sandbox's root has no /bin/tar"
	case msg == "":
		msg = fmt.Sprintf("tar exited with status %d", x.Code)
	}
	return &ArchiveError{Msg: msg, Restore: restore}
}

// firstBytes keeps the first tarStderr bytes of tar's complaint.
type firstBytes struct {
	mu sync.Mutex
	b  []byte
}

func (t *firstBytes) write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p[:min(len(p), max(tarStderr-len(t.b), 0))]...)
}

func (t *firstBytes) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
