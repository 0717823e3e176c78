package sandbox

import (
	"bufio"
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
)

// AgentCommand is the hidden subcommand of the conch binary (and the only
// one of conch-sandbox-agent) that runs as the resident agent inside each
// sandbox.
const AgentCommand = "sandbox-agent"

// AgentBinaryName is the agent-only binary the executor prefers, found
// beside its own.
const AgentBinaryName = "conch-sandbox-agent"

// Paths inside the sandbox.
const (
	agentDir  = "/run/conch"
	agentPath = agentDir + "/agent"
	// ToolsDir holds the commands of tools moved into the shell: a manifest,
	// one link to the conch binary per tool, and the socket their calls go
	// through. It is on every sandbox's PATH, read-only.
	ToolsDir = agentDir + "/tools"
	// AgentPath is where the agent binary is inside a sandbox; ToolPath is
	// the conch binary, to which tool commands link.
	AgentPath      = agentPath
	ToolPath       = agentDir + "/tool"
	WorkspaceDir   = "/home/workspace"
	sandboxUID     = 1000
	sandboxGID     = 1000
	shellPath      = "/bin/sh"
	agentReadBlock = 32 << 10
)

// RunAgent is the main of the agent inside a sandbox. It reads requests on
// stdin and answers on stdout until stdin closes, then kills what it started.
func RunAgent() error {
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
		out:   newFrameWriter(os.Stdout),
		procs: map[uint32]*agentProc{},
		spawn: make(chan spawnReq),
	}
	go a.spawner()
	if err := bridgeEgress(); err != nil {
		return err
	}
	if err := a.out.write(frameReady, 0, nil); err != nil {
		return fmt.Errorf("agent: announce: %w", err)
	}
	err := a.serve(bufio.NewReaderSize(os.Stdin, 64<<10))
	a.killAll()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type agent struct {
	out   *frameWriter
	mu    sync.Mutex
	procs map[uint32]*agentProc
	spawn chan spawnReq
}

type agentProc struct {
	cmd   *exec.Cmd
	stdin chan []byte // nil entry closes stdin
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
		f, err := readFrame(r, maxFrame)
		if err != nil {
			return err
		}
		switch f.typ {
		case frameStart:
			var m startMsg
			if err := json.Unmarshal(f.payload, &m); err != nil {
				a.exitWith(f.id, exitMsg{Code: -1, Error: "bad start request"})
				continue
			}
			a.start(f.id, m)
		case frameStdin, frameEOF:
			a.mu.Lock()
			p := a.procs[f.id]
			a.mu.Unlock()
			if p == nil {
				continue
			}
			data := f.payload
			if f.typ == frameEOF {
				data = nil
			}
			select {
			case p.stdin <- data:
			default: // a command that does not read its input loses it
			}
		case frameKill:
			a.mu.Lock()
			p := a.procs[f.id]
			a.mu.Unlock()
			if p != nil {
				// The shell is the init of its own pid namespace: when it
				// dies the kernel kills everything the command started.
				_ = p.cmd.Process.Kill()
			}
		}
	}
}

func (a *agent) exitWith(id uint32, m exitMsg) {
	b, _ := json.Marshal(m)
	_ = a.out.write(frameExit, id, b)
}

// inlineMax is the longest command passed as an argument; longer ones go
// through a memory file, since one argv string may not exceed 128 KiB.
const inlineMax = 64 << 10

// The init shell of a command holds, besides stdio, the write end of a pipe
// for the final directory and, for a long command, a sealed memory file
// holding it. The agent passes them as fds, never through a path: nothing
// in the sandbox's filesystem is the agent's to read or write, so nothing
// a command plants there can block, mislead or kill it.
const (
	cwdFD = 3
	cmdFD = 4
)

// shellScript is run by the init shell of the command's pid namespace: it
// changes to the directory $1 (or, if that no longer exists and a fallback
// $3 is given, to $3, saying so on stderr) and runs the command in a child
// shell (so that the command is an ordinary process: pid 1 ignores signals
// it has no handler for). The child shell evaluates the command ($2), or
// sources it from the memory file when fromFile, and records its final
// directory on exit when asked.
//
// The command inherits only stdio: the child shell closes the fds at once,
// the init shell keeps them, and the child reaches them through /proc/<init pid>/fd (a
// sourced file is opened close-on-exec by the shell). A command can write
// there too, but only to mislead about its own directory, which it can
// change anyway; the agent validates what it reads.
func shellScript(track, fromFile bool) string {
	// exec with redirections alone closes the fds for good; on a command
	// the shell would keep them open aside, at fds of its choosing.
	inner := `exec ` + strconv.Itoa(cwdFD) + `>&- ` + strconv.Itoa(cmdFD) + `<&-; __conch_cmd=$1; __conch_fds=$2; shift 2; `
	if track {
		inner += `trap "pwd 2>/dev/null >$__conch_fds/` + strconv.Itoa(cwdFD) + `" EXIT; `
	}
	if fromFile {
		inner += `. "$__conch_fds/` + strconv.Itoa(cmdFD) + `"`
	} else {
		inner += `eval "$__conch_cmd"`
	}
	// A memory bomb, not the agent, is what the OOM killer should pick.
	return `echo 1000 >/proc/self/oom_score_adj 2>/dev/null; ` +
		`if [ -n "$3" ] && ! [ -d "$1" ]; then ` +
		`printf 'conch: working directory %s no longer exists; starting in %s\n' "$1" "$3" >&2; cd -- "$3" || exit 1; ` +
		`else cd -- "$1" || exit 1; fi; ` +
		// /proc shows the sandbox's pid namespace, where $$ means nothing.
		`read -r __conch_pid __conch_rest </proc/self/stat; ` +
		shellPath + ` -c '` + inner + `' sh "$2" "/proc/$__conch_pid/fd"`
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
		if keep := 2*maxCwd + 2; len(tail) > keep {
			tail = append(tail[:0], tail[len(tail)-keep:]...)
		}
	}
	line := strings.TrimSuffix(string(tail), "\n")
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if line == "" || len(line) > maxCwd || !filepath.IsAbs(line) || strings.ContainsRune(line, 0) {
		return ""
	}
	return filepath.Clean(line)
}

func (a *agent) start(id uint32, m startMsg) {
	var cmdF *os.File
	arg := m.Command
	if len(m.Command) > inlineMax || strings.ContainsRune(m.Command, 0) {
		var err error
		if cmdF, err = commandFile(m.Command); err != nil {
			a.exitWith(id, exitMsg{Code: -1, Error: "pass command: " + err.Error()})
			return
		}
		defer cmdF.Close()
		arg = ""
	}
	cwdR := -1
	var cwdW *os.File
	if m.TrackCwd {
		var err error
		if cwdR, cwdW, err = cwdPipe(); err != nil {
			a.exitWith(id, exitMsg{Code: -1, Error: err.Error()})
			return
		}
		// The agent keeps no write end: once the command's processes are
		// gone, the read end is at end of file.
		defer cwdW.Close()
	}
	dir := m.Dir
	if dir == "" {
		dir = WorkspaceDir
	}
	cmd := exec.Command(shellPath, "-c", shellScript(m.TrackCwd, cmdF != nil), "sh", dir, arg, m.FallbackDir)
	cmd.Env = m.Env
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{cwdW, cmdF}
	// Its own pid namespace (the tree ends with its init) and cgroup
	// namespace (its cgroup reads "/", not the executor's host path).
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWCGROUP, Setsid: true}
	p := &agentProc{cmd: cmd, stdin: make(chan []byte, 64)}
	req := spawnReq{cmd: cmd, done: make(chan error, 1)}
	failStart := func(err error) {
		if cwdR >= 0 {
			unix.Close(cwdR)
		}
		a.exitWith(id, exitMsg{Code: -1, Error: "start shell: " + err.Error()})
	}

	var readers []io.Reader
	var closers []io.Closer
	var stdin io.WriteCloser
	if m.Pty {
		cmd.SysProcAttr.Setctty = true
		req.ptmx = make(chan *os.File, 1)
		a.spawn <- req
		ptmx := <-req.ptmx
		if err := <-req.done; err != nil {
			failStart(err)
			return
		}
		if m.Rows > 0 && m.Cols > 0 {
			_ = pty.Setsize(ptmx, &pty.Winsize{Rows: m.Rows, Cols: m.Cols})
		}
		readers, closers, stdin = []io.Reader{ptmx}, []io.Closer{ptmx}, ptmx
	} else {
		in, err1 := cmd.StdinPipe()
		outR, err2 := cmd.StdoutPipe()
		errR, err3 := cmd.StderrPipe()
		if err := errors.Join(err1, err2, err3); err != nil {
			failStart(err)
			return
		}
		a.spawn <- req
		if err := <-req.done; err != nil {
			failStart(err)
			return
		}
		readers, stdin = []io.Reader{outR, errR}, in
	}
	a.mu.Lock()
	a.procs[id] = p
	a.mu.Unlock()
	_ = a.out.write(frameStarted, id, nil)
	go feedStdin(stdin, p.stdin, m.Pty)

	dropped := make([]bool, len(readers))
	var wg sync.WaitGroup
	for i, r := range readers {
		typ := frameStdout
		if i == 1 {
			typ = frameStderr
		}
		wg.Go(func() { dropped[i] = a.forward(id, typ, r, m.Budget) })
	}
	go func() {
		wg.Wait()
		err := cmd.Wait()
		for _, c := range closers {
			_ = c.Close()
		}
		a.mu.Lock()
		delete(a.procs, id)
		a.mu.Unlock()
		close(p.stdin)
		res := exitMsg{StdoutDropped: dropped[0], StderrDropped: len(dropped) > 1 && dropped[1]}
		res.Code, res.Signal = exitStatus(cmd, err)
		if cwdR >= 0 {
			res.Cwd = readCwd(cwdR)
			unix.Close(cwdR)
		}
		a.exitWith(id, res)
	}()
}

// forward sends up to budget bytes of r to the host and drains the rest,
// so that a flood never blocks the command nor grows any buffer. It reports
// whether anything was dropped.
func (a *agent) forward(id uint32, typ byte, r io.Reader, budget int64) bool {
	buf := make([]byte, agentReadBlock)
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
				_ = a.out.write(typ, id, buf[:keep])
				budget -= keep
			}
		}
		if err != nil {
			return dropped
		}
	}
}

func feedStdin(w io.WriteCloser, in <-chan []byte, isPty bool) {
	for data := range in {
		if data == nil {
			if isPty {
				_, _ = w.Write([]byte{4}) // ^D: end of input on a terminal
				continue
			}
			break
		}
		if _, err := w.Write(data); err != nil {
			break
		}
	}
	if !isPty {
		_ = w.Close()
	}
	for range in { // keep the channel drained until the process ends
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
	for _, p := range a.procs {
		_ = p.cmd.Process.Kill()
	}
}

// bridgeEgress, in a sandbox with network, listens on EgressProxyAddr and
// joins each connection to the host's proxy socket: the only way out of
// the sandbox's network namespace, which has loopback alone. It is ready
// before the agent announces itself.
func bridgeEgress() error {
	sock := filepath.Join(egressDir, egressSocket)
	if _, err := os.Lstat(sock); err != nil {
		return nil
	}
	l, err := net.Listen("tcp", EgressProxyAddr)
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
