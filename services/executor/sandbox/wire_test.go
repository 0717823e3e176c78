package sandbox

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
)

// encodeFrame is a frame as the agent writes it.
func encodeFrame(typ byte, id uint32, payload []byte) []byte {
	var b bytes.Buffer
	fw := wire.NewWriter(&b)
	if err := fw.Write(typ, id, payload); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func exitFrame(id uint32, m wire.ExitMsg) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return encodeFrame(wire.FrameExit, id, b)
}

// protoSandbox is a sandbox with no agent behind it, holding the processes
// a host that sent Start frames for ids 1..n would hold; the test plays the
// agent by feeding frames to its read loop.
type protoSandbox struct {
	*Sandbox
	procs []*Process
	out   [][2]bytes.Buffer
}

func newProtoSandbox(n int, budget int64) *protoSandbox {
	ps := &protoSandbox{
		Sandbox: &Sandbox{
			rt:    &Runtime{log: slog.New(slog.DiscardHandler)},
			procs: map[uint32]*Process{},
			cwd:   wire.WorkspaceDir,
			done:  make(chan struct{}),
			// No group behind it: an OOM check counts nothing.
			cg: &cgroup{root: &cgroupRoot{v2: true}, dirs: []string{"/nonexistent"}},
		},
		out: make([][2]bytes.Buffer, n),
	}
	for i := range n {
		p := &Process{sb: ps.Sandbox, id: uint32(i + 1), done: make(chan struct{}), piped: make(chan struct{})}
		p.opts = Options{Budget: budget, TrackCwd: true, OnOutput: func(st Stream, b []byte) {
			ps.out[i][st-1].Write(b)
		}}
		ps.Sandbox.procs[p.id] = p
		ps.procs = append(ps.procs, p)
	}
	return ps
}

// TestForgedFrames plays an agent that sends what no honest agent sends:
// every such frame ends the sandbox with ErrProtocol, every waiting caller
// is released, and nothing panics or hangs.
func TestForgedFrames(t *testing.T) {
	t.Parallel()
	started := encodeFrame(wire.FrameStarted, 1, nil)
	cases := []struct {
		name   string
		frames [][]byte
	}{
		{"second started", [][]byte{started, started}},
		{"started with payload", [][]byte{encodeFrame(wire.FrameStarted, 1, []byte("x"))}},
		{"output before started", [][]byte{encodeFrame(wire.FrameStdout, 1, []byte("hi"))}},
		{"stderr before started", [][]byte{encodeFrame(wire.FrameStderr, 1, []byte("hi"))}},
		{"exit twice", [][]byte{started, exitFrame(1, wire.ExitMsg{}), exitFrame(1, wire.ExitMsg{})}},
		{"started after exit", [][]byte{exitFrame(1, wire.ExitMsg{}), started}},
		{"output after exit", [][]byte{started, exitFrame(1, wire.ExitMsg{}), encodeFrame(wire.FrameStdout, 1, []byte("late"))}},
		{"unknown process", [][]byte{encodeFrame(wire.FrameStarted, 99, nil)}},
		{"process zero", [][]byte{encodeFrame(wire.FrameExit, 0, []byte("{}"))}},
		{"second ready", [][]byte{encodeFrame(wire.FrameReady, 0, nil)}},
		{"host frame type", [][]byte{encodeFrame(wire.FrameStart, 1, []byte("{}"))}},
		{"unknown type", [][]byte{encodeFrame('Z', 1, nil)}},
		{"exit not JSON", [][]byte{encodeFrame(wire.FrameExit, 1, []byte("{"))}},
		{"exit code out of range", [][]byte{exitFrame(1, wire.ExitMsg{Code: 1 << 20})}},
		{"negative signal", [][]byte{exitFrame(1, wire.ExitMsg{Code: 1, Signal: -9})}},
		{"relative cwd", [][]byte{exitFrame(1, wire.ExitMsg{Cwd: "tmp"})}},
		{"unclean cwd", [][]byte{exitFrame(1, wire.ExitMsg{Cwd: "/tmp/../etc"})}},
		{"cwd with NUL", [][]byte{exitFrame(1, wire.ExitMsg{Cwd: "/tmp\x00x"})}},
		{"cwd too long", [][]byte{exitFrame(1, wire.ExitMsg{Cwd: "/" + strings.Repeat("a", wire.MaxCwd)})}},
		{"oversized frame", [][]byte{binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte{wire.FrameStdout}, 1), wire.MaxAgentFrame+1)}},
		{"gigantic frame", [][]byte{binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte{wire.FrameStdout}, 1), 1<<32-1)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ps := newProtoSandbox(2, -1)
			// A frame after the violation must never be applied.
			frames := append(bytes.Join(c.frames, nil), exitFrame(2, wire.ExitMsg{Code: 7, Cwd: "/forged"})...)
			ps.readLoop(bufio.NewReader(bytes.NewReader(frames)))
			select {
			case <-ps.Done():
			default:
				t.Fatal("the sandbox survived a protocol violation")
			}
			if !errors.Is(ps.dead, ErrProtocol) {
				t.Fatalf("sandbox ended with %v, want ErrProtocol", ps.dead)
			}
			for _, p := range ps.procs {
				select {
				case <-p.Done():
				case <-time.After(10 * time.Second):
					t.Fatalf("process %d never released", p.id)
				}
			}
			if e := ps.procs[1].Exit(); e.Code == 7 || !errors.Is(e.Err, ErrGone) {
				t.Fatalf("frame after the violation applied: %+v", e)
			}
			if ps.Cwd() == "/forged" {
				t.Fatal("a forged directory was taken")
			}
		})
	}
}

// TestHonestFrames is the protocol an honest agent speaks: it never ends the
// sandbox, and the host keeps to the budget even if the agent does not.
func TestHonestFrames(t *testing.T) {
	t.Parallel()
	ps := newProtoSandbox(2, 5)
	frames := bytes.Join([][]byte{
		encodeFrame(wire.FrameStarted, 1, nil),
		encodeFrame(wire.FrameStdout, 1, []byte("hello world")),
		encodeFrame(wire.FrameStderr, 1, []byte("ab")),
		encodeFrame(wire.FrameStderr, 1, []byte("cd")),
		// A shell that failed to start exits without having started.
		exitFrame(2, wire.ExitMsg{Code: -1, Error: "start shell: boom"}),
		exitFrame(1, wire.ExitMsg{Code: 3, Cwd: "/tmp/x"}),
	}, nil)
	ps.readLoop(bufio.NewReader(bytes.NewReader(frames)))
	if errors.Is(ps.dead, ErrProtocol) {
		t.Fatalf("honest frames ended the sandbox: %v", ps.dead)
	}
	e := ps.procs[0].Exit()
	if e.Code != 3 || !e.StdoutDropped || e.StderrDropped {
		t.Fatalf("exit = %+v", e)
	}
	if got := ps.out[0][0].String() + "|" + ps.out[0][1].String(); got != "hello|abcd" {
		t.Fatalf("output = %q, want the budget of 5 bytes per stream", got)
	}
	if e := ps.procs[1].Exit(); e.Code != -1 || e.Err == nil {
		t.Fatalf("failed start = %+v", e)
	}
	if ps.Cwd() != "/tmp/x" {
		t.Fatalf("cwd = %q", ps.Cwd())
	}
}

// FuzzAgentFrames feeds arbitrary bytes to the host's frame decoder and
// protocol state machine: nothing panics, no process hears output before
// it started or after it ended, and no stream gets more than its budget.
func FuzzAgentFrames(f *testing.F) {
	started := encodeFrame(wire.FrameStarted, 1, nil)
	for _, seed := range [][]byte{
		nil,
		bytes.Join([][]byte{started, encodeFrame(wire.FrameStdout, 1, []byte("out")), exitFrame(1, wire.ExitMsg{Cwd: "/tmp"})}, nil),
		bytes.Join([][]byte{started, started}, nil),
		bytes.Join([][]byte{encodeFrame(wire.FrameStderr, 2, []byte("early")), exitFrame(2, wire.ExitMsg{Code: 137, Signal: 9})}, nil),
		bytes.Join([][]byte{exitFrame(1, wire.ExitMsg{}), exitFrame(1, wire.ExitMsg{})}, nil),
		encodeFrame(wire.FrameExit, 3, []byte(`{"code":1e9,"cwd":"\u0000"}`)),
		encodeFrame(wire.FrameReady, 0, nil),
		{wire.FrameStdout, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff},
		{wire.FrameStdout, 0, 0, 0, 1, 0, 0, 0, 9, 'x'},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const budget = 8
		ps := newProtoSandbox(3, budget)
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			fr, err := wire.ReadFrame(r, wire.MaxAgentFrame)
			if err != nil {
				break
			}
			var before [2]int
			var p *Process
			if int(fr.ID) >= 1 && int(fr.ID) <= len(ps.procs) {
				p = ps.procs[fr.ID-1]
				before = [2]int{ps.out[fr.ID-1][0].Len(), ps.out[fr.ID-1][1].Len()}
			}
			wasRunning, wasDone := p != nil && p.running, p != nil && closed(p.Done())
			if err := ps.dispatch(fr); err != nil {
				if !closed(ps.Done()) {
					ps.markDead(err)
				}
				break
			}
			if p != nil && (fr.Type == wire.FrameStdout || fr.Type == wire.FrameStderr) && (!wasRunning || wasDone) {
				after := [2]int{ps.out[fr.ID-1][0].Len(), ps.out[fr.ID-1][1].Len()}
				if after != before {
					t.Fatalf("output reached process %d outside its run", fr.ID)
				}
			}
		}
		for i := range ps.out {
			if ps.out[i][0].Len() > budget || ps.out[i][1].Len() > budget {
				t.Fatalf("process %d got %d+%d bytes, budget %d", i+1, ps.out[i][0].Len(), ps.out[i][1].Len(), budget)
			}
		}
		if c := ps.Cwd(); c != wire.WorkspaceDir && !validCwd(c) {
			t.Fatalf("took directory %q", c)
		}
	})
}
