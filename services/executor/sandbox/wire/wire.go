// Package wire is what the host and the agent inside a sandbox agree on:
// the frames they exchange over the agent's stdin and stdout, and the
// paths and ids inside a sandbox both rely on. It is the whole of the
// trust boundary's interface: the host (package sandbox) reads the
// agent's frames as untrusted input, and the agent (package agent), which
// runs inside the sandbox as its user, links nothing of the host.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/conch-sh/conch/services/internal/contract"
)

// The agent and the host talk over the agent's stdin and stdout in frames:
// one type byte, a 4-byte process id, a 4-byte payload length, the payload.
// Output is sent as raw bytes; control messages carry JSON.
const (
	FrameReady   byte = 'R' // agent → host: ready for commands
	FrameStart   byte = 'S' // host → agent: start a process (JSON StartMsg)
	FrameStdin   byte = 'I' // host → agent: bytes for stdin
	FrameEOF     byte = 'E' // host → agent: close stdin
	FrameKill    byte = 'K' // host → agent: kill the process and its tree
	FrameResize  byte = 'W' // host → agent: resize the process's terminal (4 bytes: rows, cols, big-endian uint16s)
	FrameStdout  byte = 'O' // agent → host: stdout bytes
	FrameStderr  byte = 'e' // agent → host: stderr bytes
	FrameStarted byte = 's' // agent → host: the process started (JSON StartedMsg for a process with a host pipe, else empty)
	FrameTaken   byte = 'T' // host → agent: the host has taken the process's pipe, or given up on it; the agent closes its end
	FrameExit    byte = 'X' // agent → host: the process ended (JSON ExitMsg)
	FrameStdinOK byte = 'A' // agent → host: a stdin or EOF frame was handed to the process (or dropped: it reads no more)

	// StdinWindow is how many stdin and EOF frames of one process the
	// host may have sent that the agent has not handed on (FrameStdinOK);
	// the agent holds up to AgentStdinQueue, so a host that keeps to the
	// window never has input dropped, and a slow reader slows its writer.
	StdinWindow     = 32
	AgentStdinQueue = 64
	// StdinFrame is the most input one frame carries: the window holds
	// at most 8 MiB in the agent, in the sandbox's memory.
	StdinFrame = 256 << 10

	FrameHeader = 9
	// MaxFrame bounds a frame: a command of up to 1 MiB plus its JSON
	// envelope and escaping fits.
	MaxFrame = 8 << 20
	// MaxAgentFrame bounds a frame from the agent, which the host reads as
	// untrusted input: the agent sends output in reads of ReadBlock
	// and exit reports of a few kilobytes, so nothing legitimate is larger.
	MaxAgentFrame = 64 << 10
	// MaxCwd bounds a reported working directory (PATH_MAX).
	MaxCwd = 4096
)

// StartMsg asks the agent to start /bin/sh with a command.
type StartMsg struct {
	Command string   `json:"command"`
	Dir     string   `json:"dir"`
	Env     []string `json:"env"`
	Pty     bool     `json:"pty,omitempty"`
	Rows    uint16   `json:"rows,omitempty"`
	Cols    uint16   `json:"cols,omitempty"`
	// Budget is how many bytes of each stream the agent forwards; the rest
	// is read and dropped so that the command never blocks on a full pipe.
	Budget int64 `json:"budget"`
	// TrackCwd makes the shell record its final directory.
	TrackCwd bool `json:"track_cwd,omitempty"`
	// FallbackDir is where the command starts if Dir no longer exists
	// (the sandbox's current directory was deleted); empty means Dir must
	// exist.
	FallbackDir string `json:"fallback_dir,omitempty"`
	// HostPipe, PipeStdout or PipeStdin, hands that stream of the process
	// to the host as the pipe itself: the agent reports the fd of its end
	// (StartedMsg), which the host takes from it (pidfd_getfd) and then
	// confirms with FrameTaken, and the bytes no longer pass through the
	// agent. Not with Pty.
	HostPipe string `json:"host_pipe,omitempty"`
}

// The streams a process may hand to the host as a pipe.
const (
	PipeStdout = "stdout"
	PipeStdin  = "stdin"
)

// StartedMsg is the payload of FrameStarted for a process started with a
// HostPipe: the fd, in the agent, of the agent's end of that pipe.
type StartedMsg struct {
	PipeFD int `json:"pipe_fd"`
}

// ExitMsg reports how a process ended.
type ExitMsg struct {
	Code          int    `json:"code"`
	Signal        int    `json:"signal,omitempty"`
	Cwd           string `json:"cwd,omitempty"`
	Error         string `json:"error,omitempty"`
	StdoutDropped bool   `json:"stdout_dropped,omitempty"`
	StderrDropped bool   `json:"stderr_dropped,omitempty"`
}

// Frame is one frame: its type, the process it is about, its payload.
type Frame struct {
	Type    byte
	ID      uint32
	Payload []byte
}

// Writer writes frames from many goroutines.
type Writer struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10)}
}

func (fw *Writer) Write(typ byte, id uint32, payload []byte) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(payload), MaxFrame)
	}
	var h [FrameHeader]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:5], id)
	binary.BigEndian.PutUint32(h[5:9], uint32(len(payload)))
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if _, err := fw.w.Write(h[:]); err != nil {
		return err
	}
	if _, err := fw.w.Write(payload); err != nil {
		return err
	}
	return fw.w.Flush()
}

// ErrFrameTooLarge is a frame header announcing more than the reader takes.
var ErrFrameTooLarge = errors.New("frame too large")

// ReadFrame reads one frame of at most limit payload bytes; the payload is
// allocated only once the header has been checked against limit.
func ReadFrame(r *bufio.Reader, limit uint32) (Frame, error) {
	var h [FrameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(h[5:9])
	if n > limit {
		return Frame{}, fmt.Errorf("%w: %d bytes of %q, limit %d", ErrFrameTooLarge, n, h[0], limit)
	}
	f := Frame{Type: h[0], ID: binary.BigEndian.Uint32(h[1:5]), Payload: make([]byte, n)}
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		return Frame{}, fmt.Errorf("read frame payload: %w", err)
	}
	return f, nil
}

// AgentCommand is the hidden subcommand of the conch binary (and the only
// one of conch-sandbox-agent) that runs as the resident agent inside each
// sandbox.
const AgentCommand = "sandbox-agent"

// WatchCommand is the agent binary's file watcher subcommand, run as a
// process of its own in a sandbox: `sandbox-watch [-r] -- DIR`. It writes
// one WatchEvent of JSON per line.
const WatchCommand = "sandbox-watch"

// A file watch's bounds: the directories one watches, and the events it
// tells per window (the same path's changes of one kind told once).
const (
	WatchMaxDirs   = 4096
	WatchMaxEvents = 256
	WatchWindow    = 50 * time.Millisecond
	// WatchMaxLine bounds a line the host reads from a watcher: a path
	// of PATH_MAX escaped, and its envelope.
	WatchMaxLine = 4*4096 + 256
)

// A file watch's operations: WatchReady first, once the directory is
// watched; WatchCoalesced says how many events a window left out
// (Dropped), or that the kernel's queue overflowed (Overflow).
const (
	WatchReady     = "ready"
	WatchCreate    = "create"
	WatchWrite     = "write"
	WatchRemove    = "remove"
	WatchRename    = "rename"
	WatchCoalesced = "coalesced"
)

// WatchEvent is one line of a file watch.
type WatchEvent struct {
	Op       string `json:"op"`
	Path     string `json:"path,omitempty"`
	Dropped  int    `json:"dropped,omitempty"`
	Overflow bool   `json:"overflow,omitempty"`
}

// AgentBinaryName is the agent-only binary the executor prefers, found
// beside its own.
const AgentBinaryName = "conch-sandbox-agent"

// Paths inside the sandbox.
const (
	AgentDir  = "/run/conch"
	AgentPath = AgentDir + "/agent"
	// ToolsDir holds the commands of tools moved into the shell: a manifest,
	// one link to the conch binary per tool, and the socket their calls go
	// through. It is on every sandbox's PATH, read-only.
	ToolsDir = AgentDir + "/tools"
	// SkillsDir holds the sandbox's skills, one directory each; every
	// sandbox sees it, read-only, as contract.SkillsDir too (a link), so
	// that a warm sandbox can be given skills after it started.
	SkillsDir = AgentDir + "/skills"
	// AgentPath is where the agent binary is inside a sandbox; ToolPath is
	// the conch binary, to which tool commands link.
	ToolPath     = AgentDir + "/tool"
	WorkspaceDir = contract.WorkspaceDir
	UID          = 1000
	GID          = 1000
	ShellPath    = "/bin/sh"
	ReadBlock    = 32 << 10
)

// EgressProxyAddr is where, inside a sandbox with network, the agent
// listens for proxy clients.
const EgressProxyAddr = "127.0.0.1:3128"

// EgressDir holds, inside a sandbox with network, the socket of the
// host's proxy.
const (
	EgressDir    = AgentDir + "/egress"
	EgressSocket = "proxy.sock"
)
