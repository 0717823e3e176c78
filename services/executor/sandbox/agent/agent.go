// Package agent is the resident agent inside each sandbox: it starts the
// host's commands as the sandbox's user, streams their output back and
// reports how they ended, over the frames of package wire. It runs on the
// untrusted side of the boundary, and links nothing of the host.
package agent

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/internal/shellquote"
)

// Run is the main of the agent inside a sandbox. It reads requests on
// stdin and answers on stdout until stdin closes, then kills what it started.
func Run() error {
	// Nothing the agent was given beyond stdio may reach a command.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("agent: mark fds close-on-exec: %w", err)
	}
	// Keep commands out of the agent's memory and fds (/proc/1/mem,
	// /proc/1/fd, ptrace): they run as the same uid, and the agent's
	// stdout is the channel the host believes.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("agent: make non-dumpable: %w", err)
	}
	a := &agent{
		out:    wire.NewWriter(os.Stdout),
		procs:  map[uint32]*agentProc{},
		handed: map[uint32]*os.File{},
		spawn:  make(chan spawnReq),
	}
	go a.spawner()
	if err := bridgeEgress(); err != nil {
		return err
	}
	if err := a.out.Write(wire.FrameReady, 0, nil); err != nil {
		return fmt.Errorf("agent: announce: %w", err)
	}
	// The sandbox's cgroups held bubblewrap before it started anything,
	// so a process started ahead of the first command is in them too.
	a.mu.Lock()
	a.prepareSpare()
	a.mu.Unlock()
	err := a.serve(bufio.NewReaderSize(os.Stdin, 64<<10))
	a.killAll()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type agent struct {
	out   *wire.Writer
	spawn chan spawnReq

	mu     sync.Mutex
	procs  map[uint32]*agentProc
	live   int    // commands started and not ended
	epoch  uint64 // commands ever started
	spare  *spare
	closed bool
	// handed are the agent's ends of pipes handed to the host
	// (StartMsg.HostPipe), by process, kept open until the host says it
	// has taken them (FrameTaken), whether or not the process still
	// runs: closed sooner, the fd could name another file by the time the
	// host takes it.
	handed map[uint32]*os.File
}

type agentProc struct {
	cmd   *exec.Cmd
	stdin chan []byte // nil entry closes stdin
	tty   *os.File    // the terminal's master, for a process on one
}

type spawnReq struct {
	cmd  *exec.Cmd
	ptmx chan *os.File // set for a pty
	done chan error
}

// spawner starts every command from one OS thread that has given up the
// agent's capability to make pid namespaces, so that no command can inherit
// it: capabilities are per thread and a child gets its parent thread's.
func (a *agent) spawner() {
	runtime.LockOSThread() // never unlocked: the thread dies with the agent
	// A thread that could not shed its capabilities starts nothing.
	confined := confineSpawnerThread()
	for r := range a.spawn {
		if confined != nil {
			if r.ptmx != nil {
				r.ptmx <- nil
			}
			r.done <- confined
			continue
		}
		if r.ptmx != nil {
			f, err := pty.StartWithAttrs(r.cmd, nil, r.cmd.SysProcAttr)
			r.ptmx <- f
			r.done <- err
			continue
		}
		r.done <- r.cmd.Start()
	}
}

func (a *agent) serve(r *bufio.Reader) error {
	for {
		f, err := wire.ReadFrame(r, wire.MaxFrame)
		if err != nil {
			return err
		}
		switch f.Type {
		case wire.FrameStart:
			var m wire.StartMsg
			if err := json.Unmarshal(f.Payload, &m); err != nil {
				a.exitWith(f.ID, wire.ExitMsg{Code: -1, Error: "bad start request"})
				continue
			}
			a.start(f.ID, m)
		case wire.FrameStdin, wire.FrameEOF:
			data := f.Payload
			if f.Type == wire.FrameEOF {
				data = nil
			}
			// Under a.mu: the process's end closes its queue under it.
			a.mu.Lock()
			if p := a.procs[f.ID]; p != nil {
				select {
				case p.stdin <- data:
				default:
					// Only a host beyond its window fills the queue;
					// the input is dropped rather than the agent held.
					_ = a.out.Write(wire.FrameStdinOK, f.ID, nil)
				}
			}
			a.mu.Unlock()
		case wire.FrameTaken:
			a.mu.Lock()
			if h := a.handed[f.ID]; h != nil {
				_ = h.Close()
				delete(a.handed, f.ID)
			}
			a.mu.Unlock()
		case wire.FrameKill:
			a.mu.Lock()
			p := a.procs[f.ID]
			a.mu.Unlock()
			if p != nil {
				// The shell is the init of its own pid namespace: when it
				// dies the kernel kills everything the command started.
				_ = p.cmd.Process.Kill()
			}
		case wire.FrameResize:
			a.mu.Lock()
			p := a.procs[f.ID]
			a.mu.Unlock()
			// A resize of a process that ended, or has no terminal, or
			// of no size is nothing to do.
			if p != nil && p.tty != nil && len(f.Payload) == 4 {
				rows, cols := binary.BigEndian.Uint16(f.Payload[:2]), binary.BigEndian.Uint16(f.Payload[2:])
				if rows > 0 && cols > 0 {
					_ = pty.Setsize(p.tty, &pty.Winsize{Rows: rows, Cols: cols})
				}
			}
		}
	}
}

func (a *agent) exitWith(id uint32, m wire.ExitMsg) {
	b, _ := json.Marshal(m)
	_ = a.out.Write(wire.FrameExit, id, b)
}

// inlineMax is the longest command written into its init's script; longer
// ones, and ones holding a NUL, go through a sealed memory file, since one
// argv string may not exceed 128 KiB.
const inlineMax = 64 << 10

// Besides stdio, the init shell of a command holds the write end of a pipe
// for the final directory, for a spare the read end of the pipe its script
// arrives on, and for a long command a sealed memory file holding it. The
// agent passes them as fds, never through a path: nothing in the sandbox's
// filesystem is the agent's to read or write, so nothing a command plants
// there can block, mislead or kill it.
const (
	cwdFD    = 3
	scriptFD = 4
	cmdFD    = 5
)

// The init shell of a command first makes itself, not the agent, what the
// OOM killer picks, and notes its pid in the sandbox (/proc shows the
// sandbox's pid namespace, where $$ means nothing), going back to / so that
// the command finds OLDPWD as it would.
const initPrelude = `echo 1000 >/proc/self/oom_score_adj 2>/dev/null; cd -P /proc/self && __conch_pid=${PWD#/proc/} && cd / || exit 1; `

// chdir changes to the directory dir or, if that no longer exists and
// fallback is not empty, to fallback, saying so on stderr; both are shell
// words. It leaves no positional parameter. Its messages are conch's, the
// same whichever shell runs it.
func chdir(dir, fallback string) string {
	return `if [ -n ` + fallback + ` ] && ! [ -d ` + dir + ` ]; then ` +
		`printf 'conch: working directory %s no longer exists; starting in %s\n' ` + dir + ` ` + fallback + ` >&2; set -- ` + fallback + `; ` +
		`else set -- ` + dir + `; fi
cd -- "$1" 2>/dev/null || { printf 'conch: cannot change to the working directory %s\n' "$1" >&2; exit 1; }
set --
`
}

// runCommand is the end of the command's shell: it records the final
// directory on exit when asked, and evaluates $__conch_cmd, or sources the
// command from the memory file when fromFile.
func runCommand(track, fromFile bool) string {
	s := ""
	if track {
		s = `trap "pwd 2>/dev/null >$__conch_fds/` + strconv.Itoa(cwdFD) + `" EXIT; `
	}
	if fromFile {
		return s + `. "$__conch_fds/` + strconv.Itoa(cmdFD) + `"`
	}
	return s + `eval "$__conch_cmd"`
}

// initArgs is the script of an init started for its command, which takes
// the directory, fallback and command as $1, $2 and $3: an argv nothing
// else can change. It changes to the directory, runs the command in a
// child shell, so that the command is an ordinary process (pid 1 ignores
// signals it has no handler for), and exits with its status.
func initArgs(m wire.StartMsg, fromFile bool) []string {
	cmd := m.Command
	if fromFile {
		cmd = ""
	}
	return []string{"-c", initPrelude + `__conch_dir=$1 __conch_fallback=$2 __conch_cmd=$3
` + chdir(`"$__conch_dir"`, `"$__conch_fallback"`) +
		wire.ShellPath + ` -c ` + shellquote.Quote(childScript(m.TrackCwd, fromFile)) + ` sh "$__conch_cmd" "/proc/$__conch_pid/fd"
exit $?
`, "sh", m.Dir, m.FallbackDir, cmd}
}

// childScript is run by the command's shell, the init's child: it takes
// the command and the path of the init's fds as $1 and $2, and runs the
// command (runCommand).
//
// The command inherits only stdio: the child shell closes the init's other
// fds at once, and reaches them through /proc/<init pid>/fd (a sourced file
// is opened close-on-exec by the shell). A command can write there too,
// but only to mislead about its own directory, which it can change anyway;
// the agent validates what it reads.
func childScript(track, fromFile bool) string {
	// exec with redirections alone closes the fds for good; on a command
	// the shell would keep them open aside, at fds of its choosing.
	return `exec ` + strconv.Itoa(cwdFD) + `>&- ` + strconv.Itoa(scriptFD) + `<&- ` + strconv.Itoa(cmdFD) + `<&-; __conch_cmd=$1; __conch_fds=$2; shift 2; ` +
		runCommand(track, fromFile)
}

// spareArgs is the script of a spare, an init started with its child shell
// before their command: the child sources what the agent writes to the
// script pipe (spareScript), the init waits for it, so that starting the
// command costs neither a fork nor an exec.
var spareArgs = []string{"-c", initPrelude + wire.ShellPath + ` -c ` + shellquote.Quote(spareChild) + ` sh "/proc/$__conch_pid/fd"
exit $?
`, "sh"}

// spareChild is the child shell of a spare: it keeps the script pipe only
// until it has opened it to read (close-on-exec), which the script's first
// line closes.
var spareChild = `exec ` + strconv.Itoa(cwdFD) + `>&- ` + strconv.Itoa(cmdFD) + `<&-; . /proc/self/fd/` + strconv.Itoa(scriptFD)

// spareScript is what the agent writes to a spare for the command m: run by
// the child shell, it does what an init started for m and its child
// would: it exports m's environment, which a spare is started without,
// changes to m's directory and runs m.
func spareScript(m wire.StartMsg) string {
	var b strings.Builder
	b.WriteString(`exec ` + strconv.Itoa(scriptFD) + "<&-\n")
	if len(m.Env) > 0 {
		b.WriteString("export")
		for _, kv := range m.Env {
			b.WriteString(" " + shellquote.Quote(kv))
		}
		b.WriteByte('\n')
	}
	b.WriteString("__conch_fds=$1\n")
	b.WriteString(chdir(shellquote.Quote(m.Dir), shellquote.Quote(m.FallbackDir)))
	b.WriteString("__conch_cmd=" + shellquote.Quote(m.Command) + "\n")
	b.WriteString(runCommand(m.TrackCwd, false) + "\n")
	return b.String()
}

// exportable reports whether a shell started with an empty environment
// ends up, after exporting env, with the environment a shell started with
// env has: every name is a shell variable's, and none is one the shell
// sets or resets itself.
func exportable(env []string) bool {
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !isShellName(name) {
			return false
		}
		switch name {
		case "IFS", "PPID", "OPTIND", "LINENO", "PWD", "OLDPWD":
			return false
		}
	}
	return true
}

func isShellName(s string) bool {
	for i, c := range []byte(s) {
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return s != ""
}

// commandFile returns a sealed memory file holding a command too long for
// an argument.
func commandFile(command string) (*os.File, error) {
	fd, err := unix.MemfdCreate("command", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "command")
	if _, err := f.WriteString(command); err != nil {
		f.Close()
		return nil, fmt.Errorf("write command: %w", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal command: %w", err)
	}
	return f, nil
}

// cwdPipe returns the pipe the final directory is reported on; its read
// end is non-blocking, so that reading never waits on a command.
func cwdPipe() (r int, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, nil, fmt.Errorf("cwd pipe: %w", err)
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, nil, fmt.Errorf("cwd pipe: %w", err)
	}
	return p[0], os.NewFile(uintptr(p[1]), "cwd"), nil
}

// maxCwdReport bounds what the agent reads from a cwd pipe: a command can
// fill it, and grow it up to the system's pipe-max-size.
const maxCwdReport = 1 << 20

// readCwd returns the last line written to the cwd pipe fd if it is a
// valid directory, else "". It reads only what is already there: it is
// called after the command's pid namespace has ended, and a writer that
// somehow remains gets no say in how long the agent waits.
func readCwd(fd int) string {
	var tail []byte
	buf := make([]byte, 4096)
	for total := 0; total < maxCwdReport; {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n <= 0 {
			break
		}
		total += n
		tail = append(tail, buf[:n]...)
		if keep := 2*wire.MaxCwd + 2; len(tail) > keep {
			tail = append(tail[:0], tail[len(tail)-keep:]...)
		}
	}
	line := strings.TrimSuffix(string(tail), "\n")
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if line == "" || len(line) > wire.MaxCwd || !filepath.IsAbs(line) || strings.ContainsRune(line, 0) {
		return ""
	}
	return filepath.Clean(line)
}

// An init is the first process of a command's pid namespace of its own
// (the tree ends with it) and cgroup namespace (its cgroup reads "/", not
// the executor's host path).
type initProc struct {
	cmd     *exec.Cmd
	script  *os.File // a spare's: the write end of its script's pipe
	stdin   io.WriteCloser
	readers []io.Reader // stdout and stderr, or the terminal
	closers []io.Closer
	cwdR    int
}

// initSpec is how to start an init.
type initSpec struct {
	args       []string
	env        []string
	spare      bool // started before its command, which it reads from a pipe
	tty        bool
	rows, cols uint16
	cmdF       *os.File // a long command, or nil
}

// newInit starts an init.
func (a *agent) newInit(sp initSpec) (*initProc, error) {
	cwdR, cwdW, err := cwdPipe()
	if err != nil {
		return nil, err
	}
	// The agent keeps no write end: once the command's processes are gone,
	// the read end is at end of file.
	defer cwdW.Close()
	in := &initProc{cwdR: cwdR}
	fail := func(err error) (*initProc, error) {
		unix.Close(cwdR)
		if in.script != nil {
			in.script.Close()
		}
		for _, c := range in.closers {
			c.Close()
		}
		return nil, err
	}
	var scriptR *os.File
	if sp.spare {
		if scriptR, in.script, err = os.Pipe(); err != nil {
			return fail(fmt.Errorf("script pipe: %w", err))
		}
		defer scriptR.Close()
	}
	cmd := exec.Command(wire.ShellPath, sp.args...)
	cmd.Env = sp.env
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{cwdW, scriptR, sp.cmdF}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWCGROUP, Setsid: true}
	in.cmd = cmd
	req := spawnReq{cmd: cmd, done: make(chan error, 1)}
	if sp.tty {
		cmd.SysProcAttr.Setctty = true
		req.ptmx = make(chan *os.File, 1)
		a.spawn <- req
		ptmx := <-req.ptmx
		if err := <-req.done; err != nil {
			return fail(err)
		}
		if sp.rows > 0 && sp.cols > 0 {
			_ = pty.Setsize(ptmx, &pty.Winsize{Rows: sp.rows, Cols: sp.cols})
		}
		in.readers, in.closers, in.stdin = []io.Reader{ptmx}, []io.Closer{ptmx}, ptmx
		return in, nil
	}
	// Input is a pipe of the agent's own, not exec's wrapper of one, so
	// that it can be handed to the host (StartMsg.HostPipe).
	inR, inW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	cmd.Stdin = inR
	outR, err2 := cmd.StdoutPipe()
	errR, err3 := cmd.StderrPipe()
	if err := errors.Join(err2, err3); err != nil {
		inR.Close()
		inW.Close()
		return fail(err)
	}
	a.spawn <- req
	err = <-req.done
	inR.Close()
	if err != nil {
		inW.Close()
		return fail(err)
	}
	in.readers, in.stdin = []io.Reader{outR, errR}, inW
	return in, nil
}

// send writes a spare's script and closes the pipe. A script that fits the
// least buffer a pipe has is written at once; a longer one from a
// goroutine, so that the agent's loop never waits on the shell's parsing.
func (in *initProc) send(script string) error {
	if len(script) <= 4096 {
		_, err := in.script.WriteString(script)
		in.script.Close()
		return err
	}
	go func() {
		_, _ = in.script.WriteString(script)
		in.script.Close()
	}()
	return nil
}

// discard kills an init that will run nothing and waits for it.
func (in *initProc) discard() {
	_ = in.cmd.Process.Kill()
	if in.script != nil {
		in.script.Close()
	}
	_ = in.stdin.Close()
	_ = in.cmd.Wait() // closes the pipes' read ends
	for _, c := range in.closers {
		_ = c.Close()
	}
	unix.Close(in.cwdR)
}

// A spare is an init and its child shell started before their command, so
// that starting a command costs neither a fork nor an exec. Every process
// of the sandbox can reach an init's pipes (through /proc/<pid>/fd), so a
// spare is started only while no command runs, and is given to a command
// only if no other has started since: nothing that could have written to
// its script or its input ever lived beside it.
type spare struct {
	epoch uint64 // the commands started before it
	ready chan struct{}
	in    *initProc
	err   error
}

// prepareSpare starts a spare if there is none and no command runs; a.mu
// is held.
func (a *agent) prepareSpare() {
	if a.spare != nil || a.live > 0 || a.closed {
		return
	}
	s := &spare{epoch: a.epoch, ready: make(chan struct{})}
	a.spare = s
	go func() {
		defer close(s.ready)
		s.in, s.err = a.newInit(initSpec{args: spareArgs, env: []string{}, spare: true})
	}()
}

// begin counts a command as started and returns the spare it may use, if
// any.
func (a *agent) begin() *spare {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.spare
	a.spare = nil
	if s != nil && (s.epoch != a.epoch || a.live > 0) {
		go s.discard()
		s = nil
	}
	a.epoch++
	a.live++
	return s
}

// end counts a command as ended; the last one to end leaves a spare.
func (a *agent) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live--
	a.prepareSpare()
}

// discard waits for a spare and kills it.
func (s *spare) discard() {
	<-s.ready
	if s.in != nil {
		s.in.discard()
	}
}

func (a *agent) start(id uint32, m wire.StartMsg) {
	if m.Dir == "" {
		m.Dir = wire.WorkspaceDir
	}
	if strings.ContainsRune(m.Dir, 0) || strings.ContainsRune(m.FallbackDir, 0) {
		a.exitWith(id, wire.ExitMsg{Code: -1, Error: "start shell: a directory's name holds a NUL"})
		return
	}
	if m.HostPipe != "" && (m.Pty || (m.HostPipe != wire.PipeStdout && m.HostPipe != wire.PipeStdin)) {
		a.exitWith(id, wire.ExitMsg{Code: -1, Error: "start shell: a host pipe is stdout or stdin, and never a terminal"})
		return
	}
	fromFile := len(m.Command) > inlineMax || strings.ContainsRune(m.Command, 0)
	fail := func(what string, err error) {
		a.end()
		a.exitWith(id, wire.ExitMsg{Code: -1, Error: what + ": " + err.Error()})
	}
	var in *initProc
	if s := a.begin(); s != nil {
		if <-s.ready; s.err == nil && !m.Pty && !fromFile && exportable(m.Env) {
			in = s.in
		} else {
			go s.discard()
		}
	}
	// A spare that died (the OOM killer's first pick) is replaced.
	if in != nil && in.send(spareScript(m)) != nil {
		in.discard()
		in = nil
	}
	if in == nil {
		sp := initSpec{args: initArgs(m, fromFile), env: m.Env, tty: m.Pty, rows: m.Rows, cols: m.Cols}
		if fromFile {
			var err error
			if sp.cmdF, err = commandFile(m.Command); err != nil {
				fail("pass command", err)
				return
			}
			defer sp.cmdF.Close()
		}
		var err error
		if in, err = a.newInit(sp); err != nil {
			fail("start shell", err)
			return
		}
	}
	p := &agentProc{cmd: in.cmd, stdin: make(chan []byte, wire.AgentStdinQueue)}
	if m.Pty {
		p.tty, _ = in.stdin.(*os.File)
	}
	var started []byte
	var hostEnd *os.File
	switch m.HostPipe {
	case wire.PipeStdout:
		// A copy: exec closes the read end it made when the process
		// ends, which may be before the host has taken it.
		if out, ok := in.readers[0].(*os.File); ok {
			if fd, err := unix.FcntlInt(out.Fd(), unix.F_DUPFD_CLOEXEC, 0); err == nil {
				hostEnd = os.NewFile(uintptr(fd), "host-pipe")
			}
		}
	case wire.PipeStdin:
		hostEnd, _ = in.stdin.(*os.File)
	}
	if hostEnd != nil {
		started, _ = json.Marshal(wire.StartedMsg{PipeFD: int(hostEnd.Fd())})
	}
	a.mu.Lock()
	a.procs[id] = p
	if hostEnd != nil {
		a.handed[id] = hostEnd
	}
	a.mu.Unlock()
	_ = a.out.Write(wire.FrameStarted, id, started)
	if m.HostPipe != wire.PipeStdin {
		go feedStdin(in.stdin, p.stdin, m.Pty, func() { _ = a.out.Write(wire.FrameStdinOK, id, nil) })
	}

	dropped := make([]bool, len(in.readers))
	var wg sync.WaitGroup
	for i, r := range in.readers {
		typ := wire.FrameStdout
		if i == 1 {
			typ = wire.FrameStderr
		} else if m.HostPipe == wire.PipeStdout {
			continue
		}
		wg.Go(func() { dropped[i] = a.forward(id, typ, r, m.Budget) })
	}
	go func() {
		wg.Wait()
		err := in.cmd.Wait()
		for _, c := range in.closers {
			_ = c.Close()
		}
		a.mu.Lock()
		delete(a.procs, id)
		close(p.stdin)
		a.mu.Unlock()
		res := wire.ExitMsg{StdoutDropped: dropped[0], StderrDropped: len(dropped) > 1 && dropped[1]}
		res.Code, res.Signal = exitStatus(in.cmd, err)
		if m.TrackCwd {
			res.Cwd = readCwd(in.cwdR)
		}
		unix.Close(in.cwdR)
		// The answer first: the next spare is not on the command's path.
		a.exitWith(id, res)
		a.end()
	}()
}

// forward sends up to budget bytes of r to the host and drains the rest,
// so that a flood never blocks the command nor grows any buffer. It reports
// whether anything was dropped.
func (a *agent) forward(id uint32, typ byte, r io.Reader, budget int64) bool {
	buf := make([]byte, wire.ReadBlock)
	dropped := false
	for {
		n, err := r.Read(buf)
		if n > 0 {
			keep := int64(n)
			if budget >= 0 && keep > budget {
				keep = budget
				dropped = true
			}
			if keep > 0 {
				_ = a.out.Write(typ, id, buf[:keep])
				budget -= keep
			}
		}
		if err != nil {
			return dropped
		}
	}
}

// feedStdin writes the host's input to the process in order, and tells
// the host of each frame handed on (ack), so that it sends more only as
// the process reads. Input after the process stopped reading is dropped,
// and acknowledged all the same.
func feedStdin(w io.WriteCloser, in <-chan []byte, isPty bool, ack func()) {
	for data := range in {
		if data == nil {
			if isPty {
				_, _ = w.Write([]byte{4}) // ^D: end of input on a terminal
				ack()
				continue
			}
			ack()
			break
		}
		_, err := w.Write(data)
		ack()
		if err != nil {
			break
		}
	}
	if !isPty {
		_ = w.Close()
	}
	for range in { // keep the channel drained until the process ends
		ack()
	}
}

func exitStatus(cmd *exec.Cmd, err error) (code, sig int) {
	if cmd.ProcessState == nil {
		return -1, 0
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode(), 0
}

func (a *agent) killAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for _, p := range a.procs {
		_ = p.cmd.Process.Kill()
	}
	if a.spare != nil {
		go a.spare.discard()
		a.spare = nil
	}
}

// bridgeEgress, in a sandbox with network, listens on wire.EgressProxyAddr and
// joins each connection to the host's proxy socket: the only way out of
// the sandbox's network namespace, which has loopback alone. It is ready
// before the agent announces itself.
func bridgeEgress() error {
	sock := filepath.Join(wire.EgressDir, wire.EgressSocket)
	if _, err := os.Lstat(sock); err != nil {
		return nil
	}
	l, err := net.Listen("tcp", wire.EgressProxyAddr)
	if err != nil {
		return fmt.Errorf("agent: egress listener: %w", err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond) // out of fds: let some close
				continue
			}
			go bridge(c, sock)
		}
	}()
	return nil
}

// bridge copies between a client in the sandbox and the host's proxy until
// both directions end.
func bridge(c net.Conn, sock string) {
	defer c.Close()
	up, err := net.Dial("unix", sock)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, c)
		_ = up.(*net.UnixConn).CloseWrite()
	}()
	_, _ = io.Copy(c, up)
	_ = c.(*net.TCPConn).CloseWrite()
	<-done
}

// SpareCommandLines are the command lines, as /proc/<pid>/cmdline holds
// them with spaces for NULs, of an agent's spare init and the start of
// its child shell's: what tells them from commands in a listing of a
// sandbox's processes.
func SpareCommandLines() (init, childPrefix string) {
	return strings.Join(append([]string{wire.ShellPath}, spareArgs...), " "),
		strings.Join([]string{wire.ShellPath, "-c", spareChild, "sh", "/proc/"}, " ")
}
