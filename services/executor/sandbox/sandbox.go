package sandbox

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/executor/sandbox/fsview"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
)

// Stream names an output stream.
type Stream int

// The output streams; a pty's output is Stdout.
const (
	Stdout Stream = iota + 1
	Stderr
)

// ErrGone means the sandbox has ended.
var ErrGone = errors.New("sandbox: gone")

// Sandbox is a running sandbox: a bubblewrap tree with a resident agent.
type Sandbox struct {
	rt        *Runtime
	spec      Spec
	uid       int
	dir       string
	workspace string
	// vol, with the runtime's Storage, holds the sandbox's subvolumes:
	// its workspace, its /tmp (tmp, the host path bound there) and its
	// workdir's layer.
	vol, tmp string
	cg       *cgroup
	cmd      *exec.Cmd
	in       *wire.Writer
	stdin    io.WriteCloser
	mounts   []mount
	view     *fsview.View
	// system is the read-only system of a sandbox on an image root
	// (imageMounts); hostMounts are the mounts its state holds besides
	// the workspace (its workdir's layer), unmounted when it ends.
	system     []mount
	hostMounts []string
	// egress is the socket of the host's proxy, for a sandbox with network.
	egress *net.UnixListener
	// ns is its network namespace, opened on first use (netns), under
	// nsMu; closed when it is destroyed.
	nsMu sync.Mutex
	ns   *os.File

	mu     sync.Mutex
	procs  map[uint32]*Process
	nextID uint32
	cwd    string
	dead   error
	done   chan struct{}

	stopOnce    sync.Once
	stopErr     error
	destroyOnce sync.Once
	destroyErr  error
}

// ID returns the sandbox's id.
func (s *Sandbox) ID() string { return s.spec.ID }

// WorkspacePath returns the host directory of /home/workspace, for
// hydrating and flushing a persistent workspace.
func (s *Sandbox) WorkspacePath() string { return s.workspace }

// ToolsPath returns the host directory seen inside the sandbox, read-only,
// as wire.ToolsDir.
func (s *Sandbox) ToolsPath() string { return runPath(s.dir, wire.ToolsDir) }

// SkillsPath returns the host directory seen inside the sandbox,
// read-only, as wire.SkillsDir and contract.SkillsDir.
func (s *Sandbox) SkillsPath() string { return runPath(s.dir, wire.SkillsDir) }

// Egress returns the listener whose connections come from the sandbox's
// programs through the agent, to be served by the host's egress proxy; nil
// for a sandbox without network. Destroy closes it.
func (s *Sandbox) Egress() net.Listener {
	if s.egress == nil {
		return nil
	}
	return s.egress
}

// Dir returns the directory a command with workdir starts in: workdir
// when absolute, else relative to the shell's current directory.
func (s *Sandbox) Dir(workdir string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return startDir(s.cwd, workdir)
}

func startDir(cwd, workdir string) string {
	switch {
	case workdir == "":
		return cwd
	case path.IsAbs(workdir):
		return path.Clean(workdir)
	}
	return path.Join(cwd, workdir)
}

// Resolver returns what finds the programs of a command started with
// pathPrepend as the sandbox's shell would: on the sandbox's PATH, in its
// filesystem as its processes see it (package fsview).
func (s *Sandbox) Resolver(pathPrepend []string) fsview.Resolver {
	return fsview.Resolver{View: s.view, Path: commandPath(append(slices.Clone(s.spec.PathPrepend), pathPrepend...))}
}

// Cwd returns the shell's current directory as of the last command.
func (s *Sandbox) Cwd() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cwd
}

// Done is closed when the sandbox has ended.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// HostPIDs lists the host pids of every process in the sandbox, the
// bubblewrap and agent processes included.
func (s *Sandbox) HostPIDs() ([]int, error) { return s.cg.pids() }

// Options describe one command.
type Options struct {
	// Command is the shell command line.
	Command string
	// Workdir is where it starts: absolute, or relative to the current
	// directory; empty means the current directory.
	Workdir string
	// Env is extra environment, already validated.
	Env map[string]string
	// Pty runs the command under a pseudo-terminal, of Rows by Cols
	// (0: 24 by 80).
	Pty        bool
	Rows, Cols uint16
	// Budget is how many bytes of each stream reach OnOutput; the rest is
	// drained and dropped inside the sandbox. Negative means no limit.
	Budget int64
	// TrackCwd makes the command's final directory the sandbox's current
	// directory (a foreground shell call).
	TrackCwd bool
	// OnOutput receives output in order. It must not block for long.
	OnOutput func(Stream, []byte)
	// PathPrepend are directories put in front of PATH for this command,
	// after the sandbox's own.
	PathPrepend []string
	// Pipe, wire.PipeStdout or wire.PipeStdin, hands that stream to the
	// caller as a pipe (Process.Pipe) instead of OnOutput or Write: the
	// bytes do not pass through the agent. Not with Pty.
	Pipe string
}

// Exit is how a process ended.
type Exit struct {
	// Code is the exit status, 128+n for signal n; -1 when it never ran.
	Code int
	// Err is set when the sandbox failed to run the command.
	Err error
	// StdoutDropped and StderrDropped report output beyond the budget.
	StdoutDropped, StderrDropped bool
	// OOMKilled reports that the sandbox's memory limit killed something.
	OOMKilled bool
}

// Process is a command running in a sandbox.
type Process struct {
	sb       *Sandbox
	id       uint32
	opts     Options
	done     chan struct{}
	exit     Exit
	exitOnce sync.Once
	// oomBefore is the group's OOM kill count when the process started.
	oomBefore int64
	// credit holds a token for each stdin frame the agent has room for.
	credit chan struct{}
	// piped is closed once pipe or pipeErr is set, for Options.Pipe.
	piped   chan struct{}
	pipe    *os.File
	pipeErr error

	// Owned by the sandbox's read loop: whether the agent reported the
	// process started, and how much of each stream reached OnOutput.
	running bool
	sent    [2]int64
	dropped [2]bool
}

// Pipe returns the stream the process was started to hand over
// (Options.Pipe), once the agent has handed it: its stdout to read, or its
// stdin to write and close. The caller closes it.
func (p *Process) Pipe() (*os.File, error) {
	if p.opts.Pipe == "" {
		return nil, errors.New("sandbox: the process was started without a pipe")
	}
	select {
	case <-p.piped:
	case <-p.done:
	}
	select {
	case <-p.piped:
		return p.pipe, p.pipeErr
	default: // ended without handing it over
	}
	if e := p.exit; e.Err != nil {
		return nil, e.Err
	}
	return nil, ErrGone
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit returns how the process ended; valid after Done.
func (p *Process) Exit() Exit { return p.exit }

// Kill kills the process and everything it started.
func (p *Process) Kill() error {
	return p.sb.send(wire.FrameKill, p.id, nil)
}

// Resize sets the size of the terminal of a process started with Pty; it
// is nothing for one without.
func (p *Process) Resize(rows, cols uint16) error {
	return p.sb.send(wire.FrameResize, p.id, binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, rows), cols))
}

// StdinWait is how long Write waits for a process to read its input
// before it fails with ErrNotReading.
const StdinWait = 30 * time.Second

// ErrNotReading is Write's error when the process has not read its input
// for StdinWait: nothing of it is lost, but what was not sent is not.
var ErrNotReading = errors.New("sandbox: the process has not read its input for " + StdinWait.String())

// Write sends data to the process's standard input, then closes it when
// eof. It sends as fast as the process reads: never more than the agent
// holds, so that no input is dropped, waiting up to StdinWait for room.
func (p *Process) Write(data []byte, eof bool) error {
	for len(data) > 0 {
		n := min(len(data), wire.StdinFrame)
		if err := p.acquire(); err != nil {
			return err
		}
		if err := p.sb.send(wire.FrameStdin, p.id, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	if eof {
		if err := p.acquire(); err != nil {
			return err
		}
		return p.sb.send(wire.FrameEOF, p.id, nil)
	}
	return nil
}

// acquire takes room for one frame of input in the agent's queue.
func (p *Process) acquire() error {
	select {
	case <-p.credit:
		return nil
	default:
	}
	t := time.NewTimer(StdinWait)
	defer t.Stop()
	select {
	case <-p.credit:
		return nil
	case <-p.done:
		return ErrGone
	case <-t.C:
		return ErrNotReading
	}
}

func (p *Process) finish(e Exit) {
	p.exitOnce.Do(func() {
		p.exit = e
		close(p.done)
		p.sb.rt.quiet.mark()
	})
}

func (s *Sandbox) send(typ byte, id uint32, payload []byte) error {
	select {
	case <-s.done:
		return ErrGone
	default:
	}
	if err := s.in.Write(typ, id, payload); err != nil {
		return fmt.Errorf("sandbox: write to agent: %w", err)
	}
	return nil
}

// Start starts a command in the sandbox.
func (s *Sandbox) Start(opts Options) (*Process, error) {
	if opts.Pipe != "" && (opts.Pty || (opts.Pipe != wire.PipeStdout && opts.Pipe != wire.PipeStdin)) {
		return nil, errors.New("sandbox: a command's pipe is its stdout or stdin, and never a terminal")
	}
	s.mu.Lock()
	if s.dead != nil {
		s.mu.Unlock()
		return nil, ErrGone
	}
	s.nextID++
	s.rt.quiet.mark()
	p := &Process{sb: s, id: s.nextID, opts: opts, done: make(chan struct{}), oomBefore: s.cg.oomKills(), credit: make(chan struct{}, wire.StdinWindow), piped: make(chan struct{})}
	for range wire.StdinWindow {
		p.credit <- struct{}{}
	}
	s.procs[p.id] = p
	dir := startDir(s.cwd, opts.Workdir)
	// A command may delete the directory it leaves the shell in; the
	// sandbox must not be stuck there. A directory named for this command
	// alone has no such fallback: it must exist.
	fallback := ""
	if dir == s.cwd && dir != wire.WorkspaceDir {
		fallback = wire.WorkspaceDir
	}
	s.mu.Unlock()
	spec := s.spec
	spec.PathPrepend = append(append([]string(nil), spec.PathPrepend...), opts.PathPrepend...)
	env := sandboxEnv(spec)
	for k, v := range opts.Env {
		env = append(env, k+"="+v)
	}
	if opts.Pty {
		if opts.Rows == 0 || opts.Cols == 0 {
			opts.Rows, opts.Cols = 24, 80
		}
		env = append(env, "COLUMNS="+strconv.Itoa(int(opts.Cols)), "LINES="+strconv.Itoa(int(opts.Rows)))
	}
	msg, err := json.Marshal(wire.StartMsg{
		Command: opts.Command, Dir: dir, Env: env, Pty: opts.Pty, Rows: opts.Rows, Cols: opts.Cols,
		Budget: opts.Budget, TrackCwd: opts.TrackCwd, FallbackDir: fallback, HostPipe: opts.Pipe,
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: encode start: %w", err)
	}
	if err := s.send(wire.FrameStart, p.id, msg); err != nil {
		s.forget(p.id)
		return nil, err
	}
	return p, nil
}

func (s *Sandbox) forget(id uint32) {
	s.mu.Lock()
	delete(s.procs, id)
	s.mu.Unlock()
}

func (s *Sandbox) proc(id uint32) *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id]
}

// readLoop dispatches the agent's frames to processes until the agent ends
// or breaks the protocol.
func (s *Sandbox) readLoop(r *bufio.Reader) {
	for {
		f, err := wire.ReadFrame(r, wire.MaxAgentFrame)
		switch {
		case errors.Is(err, wire.ErrFrameTooLarge):
			s.violation(err)
			return
		case err != nil:
			s.markDead(fmt.Errorf("agent connection: %w", err))
			return
		}
		if err := s.dispatch(f); err != nil {
			s.violation(err)
			return
		}
	}
}

// ErrProtocol means the agent sent something the protocol does not allow.
// Whatever runs in a sandbox may have reached the agent, so the host never
// trusts a frame: a violation ends that sandbox and nothing else.
var ErrProtocol = errors.New("sandbox: agent protocol violation")

// violation ends a sandbox whose agent broke the protocol: every waiting
// caller gets an error, and the agent is stopped so that nothing it sends
// afterwards is read.
func (s *Sandbox) violation(cause error) {
	err := fmt.Errorf("%w: %w", ErrProtocol, cause)
	s.rt.log.Warn("sandbox agent broke the protocol; ending the sandbox", "sandbox", s.spec.ID, "err", err)
	s.markDead(err)
	if s.stdin != nil {
		_ = s.stdin.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		// bubblewrap kills the sandbox's pid namespace when it dies.
		_ = s.cmd.Process.Kill()
	}
}

// dispatch checks one frame from the agent against the state of its
// process and applies it. A process is announced started at most once,
// sends output only once started, and exits once (possibly without having
// started, when its shell failed to start); any other frame is an error.
func (s *Sandbox) dispatch(f wire.Frame) error {
	s.mu.Lock()
	if s.dead != nil {
		s.mu.Unlock()
		return nil
	}
	p := s.procs[f.ID]
	started := f.ID != 0 && f.ID <= s.nextID
	s.mu.Unlock()
	if p == nil {
		if f.Type == wire.FrameStdinOK && started {
			// Input the agent dropped after its process ended: the
			// process is forgotten, and its credit with it.
			return nil
		}
		// The host forgets a process only after its exit, and allocates
		// ids itself: the agent names no other.
		return fmt.Errorf("frame %q for unknown process %d", f.Type, f.ID)
	}
	switch f.Type {
	case wire.FrameStarted:
		if p.running || (p.opts.Pipe == "") != (len(f.Payload) == 0) {
			return fmt.Errorf("process %d reported started twice, or with a payload it should not have", f.ID)
		}
		p.running = true
		if p.opts.Pipe != "" {
			return s.receivePipe(p, f.Payload)
		}
	case wire.FrameStdout, wire.FrameStderr:
		if !p.running {
			return fmt.Errorf("output from process %d before it started", f.ID)
		}
		p.output(f.Type, f.Payload)
	case wire.FrameStdinOK:
		select {
		case p.credit <- struct{}{}:
		default:
			return fmt.Errorf("process %d acknowledged input that was never sent", f.ID)
		}
	case wire.FrameExit:
		e, cwd, err := s.decodeExit(p, f.Payload)
		if err != nil {
			return fmt.Errorf("exit of process %d: %w", f.ID, err)
		}
		s.mu.Lock()
		if p.opts.TrackCwd && cwd != "" {
			s.cwd = cwd
		}
		delete(s.procs, f.ID)
		s.mu.Unlock()
		p.finish(e)
	default:
		return fmt.Errorf("unexpected frame %q for process %d", f.Type, f.ID)
	}
	return nil
}

// receivePipe takes the pipe the agent reported for p (wire.StartedMsg).
// An agent naming no pipe of its own breaks the protocol; a pipe the host
// cannot take fails the process, which is killed.
func (s *Sandbox) receivePipe(p *Process, payload []byte) error {
	var m wire.StartedMsg
	if err := json.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("process %d's start report: %w", p.id, err)
	}
	f, err := s.takePipe(m.PipeFD, p.opts.Pipe)
	switch {
	case errors.Is(err, errNotPipe) || errors.Is(err, unix.EBADF):
		return fmt.Errorf("process %d's pipe: %w", p.id, err)
	case err != nil:
		p.pipeErr = fmt.Errorf("sandbox: the command's %s: %w", p.opts.Pipe, err)
		_ = p.Kill()
	default:
		p.pipe = f
	}
	// Taken or given up on: the agent closes its end either way.
	_ = s.send(wire.FrameTaken, p.id, nil)
	close(p.piped)
	return nil
}

// decodeExit validates an exit report.
func (s *Sandbox) decodeExit(p *Process, payload []byte) (Exit, string, error) {
	var m wire.ExitMsg
	if err := json.Unmarshal(payload, &m); err != nil {
		return Exit{}, "", fmt.Errorf("decode report: %w", err)
	}
	if m.Code < -1 || m.Code > 255 || m.Signal < 0 || m.Signal > 64 {
		return Exit{}, "", fmt.Errorf("status %d signal %d out of range", m.Code, m.Signal)
	}
	if m.Cwd != "" && !validCwd(m.Cwd) {
		return Exit{}, "", fmt.Errorf("invalid directory %q", m.Cwd)
	}
	e := Exit{
		Code:          m.Code,
		StdoutDropped: m.StdoutDropped || p.dropped[0],
		StderrDropped: m.StderrDropped || p.dropped[1],
	}
	if m.Error != "" {
		e.Err = errors.New(m.Error)
	}
	if m.Code == 128+int(unix.SIGKILL) {
		e.OOMKilled = s.cg.oomKills() > p.oomBefore
	}
	return e, m.Cwd, nil
}

// validCwd accepts a directory as the shell's pwd prints it: absolute,
// clean, without NUL, at most PATH_MAX.
func validCwd(d string) bool {
	return len(d) <= wire.MaxCwd && path.IsAbs(d) && path.Clean(d) == d && !strings.ContainsRune(d, 0)
}

// output passes a frame of output to the caller within the budget; the
// agent enforces the budget too, but the host does not rely on it.
func (p *Process) output(typ byte, b []byte) {
	i, st := 0, Stdout
	if typ == wire.FrameStderr {
		i, st = 1, Stderr
	}
	if budget := p.opts.Budget; budget >= 0 {
		left := max(budget-p.sent[i], 0)
		if int64(len(b)) > left {
			b = b[:left]
			p.dropped[i] = true
		}
	}
	p.sent[i] += int64(len(b))
	if len(b) > 0 && p.opts.OnOutput != nil {
		p.opts.OnOutput(st, b)
	}
}

// markDead ends every process when the agent is gone.
func (s *Sandbox) markDead(cause error) {
	s.mu.Lock()
	if s.dead != nil {
		s.mu.Unlock()
		return
	}
	s.dead = cause
	procs := s.procs
	s.procs = map[uint32]*Process{}
	close(s.done)
	s.mu.Unlock()
	for _, p := range procs {
		p.finish(Exit{Code: -1, Err: fmt.Errorf("%w: %v", ErrGone, cause)})
	}
}

// Stop kills everything in the sandbox, its agent included, and leaves
// its files on the host until Destroy: what its last processes wrote can
// still be read (a persistent workspace's final save).
func (s *Sandbox) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		_ = s.stdin.Close() // the agent kills its commands when its input ends
		var errs []error
		if err := s.cg.kill(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
		select {
		case <-s.done:
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		if s.egress != nil {
			_ = s.egress.Close()
		}
		if err := s.cg.remove(); err != nil {
			errs = append(errs, err)
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// Destroy stops the sandbox and removes it from the host.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.destroyOnce.Do(func() {
		var errs []error
		if err := s.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
		s.nsMu.Lock()
		if s.ns != nil {
			_ = s.ns.Close()
		}
		s.nsMu.Unlock()
		if err := s.unmountHost(); err != nil {
			errs = append(errs, err)
		}
		if err := unix.Unmount(s.workspace, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("sandbox: unmount workspace: %w", err))
		}
		if s.vol != "" {
			if err := removeVolumes(s.vol); err != nil {
				errs = append(errs, fmt.Errorf("sandbox: remove storage: %w", err))
			}
		}
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("sandbox: remove state: %w", err))
		}
		s.rt.uids.release(s.uid)
		s.destroyErr = errors.Join(errs...)
	})
	return s.destroyErr
}

// rootFS is the root filesystem s's system comes from.
func (s *Sandbox) rootFS() string {
	if s.spec.Image != nil {
		return s.spec.Image.Dir
	}
	return s.rt.cfg.RootFS
}

// HostUID is the host uid the sandbox's user maps to; files the host puts in
// the workspace must belong to it.
func (s *Sandbox) HostUID() int { return s.uid }
