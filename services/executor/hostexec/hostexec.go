// Package hostexec runs commands directly on the machine it runs on,
// outside any sandbox: the `gateway` host (an executor's own machine) and
// `node` hosts (a paired machine running `conch node`). It keeps the
// sandbox's contract (package sandbox: Options, Exit, output budgets,
// killing the whole tree) without its isolation; the exec policy decides
// what may run here.
//
// The environment is never inherited: a command gets a fixed PATH, HOME,
// LANG and what the request sets. Each command is its own session; when
// this process may create namespaces it also gets its own pid namespace,
// so that ending its shell ends everything it started. Otherwise the
// command's process group is killed, which setsid can escape.
package hostexec

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/internal/contract"
)

// DefaultPath is PATH for commands on the host.
const DefaultPath = contract.DefaultPath

// readBlock is the size of one output read.
const readBlock = 32 << 10

// drainGrace bounds how long output is read after the command and its
// process group are gone, for a descendant that escaped the group.
const drainGrace = 2 * time.Second

// Runner starts commands on this machine.
type Runner struct {
	// Dir is where commands start when they name no workdir; a relative
	// workdir is taken from here. It is also HOME.
	Dir string
	// Shell runs the command with -c; empty means /bin/sh.
	Shell string
	// NoPidNamespace turns off the per-command pid namespace.
	NoPidNamespace bool
	// Credential, when set, is the user commands run as, with no
	// supplementary groups: on the gateway host, an unprivileged uid of
	// their own, never the executor's.
	Credential *syscall.Credential
}

// PrepareDir makes Dir the home of Credential's user: a directory (never
// a symlink) it owns, that no one else may read.
func (r *Runner) PrepareDir() error {
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return fmt.Errorf("hostexec: %s: %w", r.Dir, err)
	}
	st, err := os.Lstat(r.Dir)
	if err != nil || !st.IsDir() {
		return fmt.Errorf("hostexec: %s is not a directory", r.Dir)
	}
	if c := r.Credential; c != nil {
		if err := os.Lchown(r.Dir, int(c.Uid), int(c.Gid)); err != nil {
			return fmt.Errorf("hostexec: %s: %w", r.Dir, err)
		}
	}
	return os.Chmod(r.Dir, 0o700)
}

// Process is a running command.
type Process struct {
	cmd   *exec.Cmd
	pidNS bool
	stdin io.WriteCloser
	pty   bool

	inMu sync.Mutex

	// killMu orders kills before the reaping: while it is held and reaped
	// is false, the command's pid and process group id are still its own.
	killMu sync.Mutex
	reaped bool

	done chan struct{}
	exit sandbox.Exit
}

// Done is closed when the command and its output have ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit returns how the command ended; valid after Done.
func (p *Process) Exit() sandbox.Exit { return p.exit }

// Kill kills the command and everything it started.
func (p *Process) Kill() error {
	p.killTree()
	return nil
}

func (p *Process) killTree() {
	p.killMu.Lock()
	defer p.killMu.Unlock()
	if p.reaped {
		return // the ids may belong to someone else by now
	}
	// In its own pid namespace the shell is init: killing it kills the
	// namespace. Its session's process group goes either way.
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

// Write writes to the command's standard input; eof closes it (a ^D on a
// terminal).
func (p *Process) Write(data []byte, eof bool) error {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if len(data) > 0 {
		if _, err := p.stdin.Write(data); err != nil {
			return fmt.Errorf("hostexec: write stdin: %w", err)
		}
	}
	if eof {
		if p.pty {
			_, err := p.stdin.Write([]byte{4})
			return err
		}
		return p.stdin.Close()
	}
	return nil
}

// Env returns the environment of a command: the fixed base and extra,
// which the caller has validated.
func (r *Runner) Env(extra map[string]string, pathPrepend []string) []string {
	base := map[string]string{"PATH": DefaultPath, "HOME": r.Dir, "LANG": "C.UTF-8", "TERM": "dumb"}
	for k, v := range extra {
		base[k] = v
	}
	if len(pathPrepend) > 0 {
		base["PATH"] = strings.Join(append(slices.Clone(pathPrepend), base["PATH"]), ":")
	}
	env := make([]string, 0, len(base))
	for k, v := range base {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// Start runs opts.Command with the shell. TrackCwd is ignored: every
// command on a host starts from its own workdir.
func (r *Runner) Start(opts sandbox.Options) (*Process, error) {
	dir := r.Dir
	if opts.Workdir != "" {
		dir = opts.Workdir
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(r.Dir, dir)
		}
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("workdir %s is not a directory on this host", dir)
	}
	shell := r.Shell
	if shell == "" {
		shell = "/bin/sh"
	}
	cmd := exec.Command(shell, "-c", opts.Command)
	cmd.Dir = dir
	cmd.Env = r.Env(opts.Env, opts.PathPrepend)
	attr := &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL, Credential: r.Credential}
	pidNS := !r.NoPidNamespace && os.Geteuid() == 0
	if pidNS {
		attr.Cloneflags = syscall.CLONE_NEWPID
	}
	cmd.SysProcAttr = attr
	p := &Process{cmd: cmd, pidNS: pidNS, pty: opts.Pty, done: make(chan struct{})}

	var readers []*os.File
	if opts.Pty {
		attr.Setctty = true
		ptmx, err := pty.StartWithAttrs(cmd, &pty.Winsize{Rows: 24, Cols: 80}, attr)
		if err != nil {
			return nil, fmt.Errorf("start shell: %w", err)
		}
		readers, p.stdin = []*os.File{ptmx}, ptmx
	} else {
		inR, inW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			closeAll(inR, inW)
			return nil, err
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			closeAll(inR, inW, outR, outW)
			return nil, err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
		err = cmd.Start()
		closeAll(inR, outW, errW) // the child has its own copies
		if err != nil {
			closeAll(inW, outR, errR)
			return nil, fmt.Errorf("start shell: %w", err)
		}
		readers, p.stdin = []*os.File{outR, errR}, inW
	}
	go p.wait(readers, opts)
	return p, nil
}

// wait forwards output until the command ends, then ends its tree and
// collects what is left.
func (p *Process) wait(readers []*os.File, opts sandbox.Options) {
	dropped := make([]bool, len(readers))
	var wg sync.WaitGroup
	for i, f := range readers {
		st := sandbox.Stdout
		if i == 1 {
			st = sandbox.Stderr
		}
		wg.Go(func() { dropped[i] = forward(f, st, opts.Budget, opts.OnOutput) })
	}
	// Wait for the shell to exit without reaping it, so that its pid and
	// process group id stay reserved while what it left is killed.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	// Nothing the command started outlives it.
	p.killTree()
	p.killMu.Lock()
	p.reaped = true
	p.killMu.Unlock()
	err := p.cmd.Wait()
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		// A descendant that left the process group still holds the
		// output open: stop reading rather than hang.
		closeAll(readers...)
		<-drained
	}
	closeAll(readers...)
	p.inMu.Lock()
	_ = p.stdin.Close()
	p.inMu.Unlock()
	x := sandbox.Exit{StdoutDropped: dropped[0], StderrDropped: len(dropped) > 1 && dropped[1], Code: -1}
	var ee *exec.ExitError
	switch {
	case err == nil:
		x.Code = 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			x.Code = 128 + int(ws.Signal())
		} else {
			x.Code = ee.ExitCode()
		}
	default:
		x.Err = err
	}
	p.exit = x
	close(p.done)
}

// forward passes up to budget bytes of f to onOutput and drains the rest.
// It reports whether anything was dropped.
func forward(f *os.File, st sandbox.Stream, budget int64, onOutput func(sandbox.Stream, []byte)) bool {
	buf := make([]byte, readBlock)
	dropped := false
	for {
		n, err := f.Read(buf)
		if n > 0 {
			keep := int64(n)
			if budget >= 0 && keep > budget {
				keep, dropped = budget, true
			}
			if keep > 0 && onOutput != nil {
				onOutput(st, append([]byte(nil), buf[:keep]...))
				budget -= keep
			}
		}
		if err != nil {
			return dropped
		}
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}
