package sandbox

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The agent and the host talk over the agent's stdin and stdout in frames:
// one type byte, a 4-byte process id, a 4-byte payload length, the payload.
// Output is sent as raw bytes; control messages carry JSON.
const (
	frameReady   byte = 'R' // agent → host: ready for commands
	frameStart   byte = 'S' // host → agent: start a process (JSON startMsg)
	frameStdin   byte = 'I' // host → agent: bytes for stdin
	frameEOF     byte = 'E' // host → agent: close stdin
	frameKill    byte = 'K' // host → agent: kill the process and its tree
	frameStdout  byte = 'O' // agent → host: stdout bytes
	frameStderr  byte = 'e' // agent → host: stderr bytes
	frameStarted byte = 's' // agent → host: the process started
	frameExit    byte = 'X' // agent → host: the process ended (JSON exitMsg)
	frameStdinOK byte = 'A' // agent → host: a stdin or EOF frame was handed to the process (or dropped: it reads no more)

	// stdinWindow is how many stdin and EOF frames of one process the
	// host may have sent that the agent has not handed on (frameStdinOK);
	// the agent holds up to agentStdinQueue, so a host that keeps to the
	// window never has input dropped, and a slow reader slows its writer.
	stdinWindow     = 32
	agentStdinQueue = 64
	// stdinFrame is the most input one frame carries: the window holds
	// at most 8 MiB in the agent, in the sandbox's memory.
	stdinFrame = 256 << 10

	frameHeader = 9
	// maxFrame bounds a frame: a command of up to 1 MiB plus its JSON
	// envelope and escaping fits.
	maxFrame = 8 << 20
	// maxAgentFrame bounds a frame from the agent, which the host reads as
	// untrusted input: the agent sends output in reads of agentReadBlock
	// and exit reports of a few kilobytes, so nothing legitimate is larger.
	maxAgentFrame = 64 << 10
	// maxCwd bounds a reported working directory (PATH_MAX).
	maxCwd = 4096
)

// startMsg asks the agent to start /bin/sh with a command.
type startMsg struct {
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
}

// exitMsg reports how a process ended.
type exitMsg struct {
	Code          int    `json:"code"`
	Signal        int    `json:"signal,omitempty"`
	Cwd           string `json:"cwd,omitempty"`
	Error         string `json:"error,omitempty"`
	StdoutDropped bool   `json:"stdout_dropped,omitempty"`
	StderrDropped bool   `json:"stderr_dropped,omitempty"`
}

type frame struct {
	typ     byte
	id      uint32
	payload []byte
}

// frameWriter writes frames from many goroutines.
type frameWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func newFrameWriter(w io.Writer) *frameWriter {
	return &frameWriter{w: bufio.NewWriterSize(w, 64<<10)}
}

func (fw *frameWriter) write(typ byte, id uint32, payload []byte) error {
	if len(payload) > maxFrame {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(payload), maxFrame)
	}
	var h [frameHeader]byte
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

// errFrameTooLarge is a frame header announcing more than the reader takes.
var errFrameTooLarge = errors.New("frame too large")

// readFrame reads one frame of at most limit payload bytes; the payload is
// allocated only once the header has been checked against limit.
func readFrame(r *bufio.Reader, limit uint32) (frame, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(h[5:9])
	if n > limit {
		return frame{}, fmt.Errorf("%w: %d bytes of %q, limit %d", errFrameTooLarge, n, h[0], limit)
	}
	f := frame{typ: h[0], id: binary.BigEndian.Uint32(h[1:5]), payload: make([]byte, n)}
	if _, err := io.ReadFull(r, f.payload); err != nil {
		return frame{}, fmt.Errorf("read frame payload: %w", err)
	}
	return f, nil
}
