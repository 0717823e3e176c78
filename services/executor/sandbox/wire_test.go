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
)

// encodeFrame is a frame as the agent writes it.
func encodeFrame(typ byte, id uint32, payload []byte) []byte {
	var b bytes.Buffer
	fw := newFrameWriter(&b)
	if err := fw.write(typ, id, payload); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func exitFrame(id uint32, m exitMsg) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return encodeFrame(frameExit, id, b)
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
			cwd:   WorkspaceDir,
			done:  make(chan struct{}),
			// No group behind it: an OOM check counts nothing.
			cg: &cgroup{root: &cgroupRoot{v2: true}, dirs: []string{"/nonexistent"}},
		},
		out: make([][2]bytes.Buffer, n),
	}
	for i := range n {
		p := &Process{sb: ps.Sandbox, id: uint32(i + 1), done: make(chan struct{})}
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
	started := encodeFrame(frameStarted, 1, nil)
	cases := []struct {
		name   string
		frames [][]byte
	}{
		{"second started", [][]byte{started, started}},
		{"started with payload", [][]byte{encodeFrame(frameStarted, 1, []byte("x"))}},
		{"output before started", [][]byte{encodeFrame(frameStdout, 1, []byte("hi"))}},
		{"stderr before started", [][]byte{encodeFrame(frameStderr, 1, []byte("hi"))}},
		{"exit twice", [][]byte{started, exitFrame(1, exitMsg{}), exitFrame(1, exitMsg{})}},
		{"started after exit", [][]byte{exitFrame(1, exitMsg{}), started}},
		{"output after exit", [][]byte{started, exitFrame(1, exitMsg{}), encodeFrame(frameStdout, 1, []byte("late"))}},
		{"unknown process", [][]byte{encodeFrame(frameStarted, 99, nil)}},
		{"process zero", [][]byte{encodeFrame(frameExit, 0, []byte("{}"))}},
		{"second ready", [][]byte{encodeFrame(frameReady, 0, nil)}},
		{"host frame type", [][]byte{encodeFrame(frameStart, 1, []byte("{}"))}},
		{"unknown type", [][]byte{encodeFrame('Z', 1, nil)}},
		{"exit not JSON", [][]byte{encodeFrame(frameExit, 1, []byte("{"))}},
		{"exit code out of range", [][]byte{exitFrame(1, exitMsg{Code: 1 << 20})}},
		{"negative signal", [][]byte{exitFrame(1, exitMsg{Code: 1, Signal: -9})}},
		{"relative cwd", [][]byte{exitFrame(1, exitMsg{Cwd: "tmp"})}},
		{"unclean cwd", [][]byte{exitFrame(1, exitMsg{Cwd: "/tmp/../etc"})}},
		{"cwd with NUL", [][]byte{exitFrame(1, exitMsg{Cwd: "/tmp\x00x"})}},
		{"cwd too long", [][]byte{exitFrame(1, exitMsg{Cwd: "/" + strings.Repeat("a", maxCwd)})}},
		{"oversized frame", [][]byte{binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte{frameStdout}, 1), maxAgentFrame+1)}},
		{"gigantic frame", [][]byte{binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32([]byte{frameStdout}, 1), 1<<32-1)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ps := newProtoSandbox(2, -1)
			// A frame after the violation must never be applied.
			frames := append(bytes.Join(c.frames, nil), exitFrame(2, exitMsg{Code: 7, Cwd: "/forged"})...)
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
		encodeFrame(frameStarted, 1, nil),
		encodeFrame(frameStdout, 1, []byte("hello world")),
		encodeFrame(frameStderr, 1, []byte("ab")),
		encodeFrame(frameStderr, 1, []byte("cd")),
		// A shell that failed to start exits without having started.
		exitFrame(2, exitMsg{Code: -1, Error: "start shell: boom"}),
		exitFrame(1, exitMsg{Code: 3, Cwd: "/tmp/x"}),
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
	started := encodeFrame(frameStarted, 1, nil)
	for _, seed := range [][]byte{
		nil,
		bytes.Join([][]byte{started, encodeFrame(frameStdout, 1, []byte("out")), exitFrame(1, exitMsg{Cwd: "/tmp"})}, nil),
		bytes.Join([][]byte{started, started}, nil),
		bytes.Join([][]byte{encodeFrame(frameStderr, 2, []byte("early")), exitFrame(2, exitMsg{Code: 137, Signal: 9})}, nil),
		bytes.Join([][]byte{exitFrame(1, exitMsg{}), exitFrame(1, exitMsg{})}, nil),
		encodeFrame(frameExit, 3, []byte(`{"code":1e9,"cwd":"\u0000"}`)),
		encodeFrame(frameReady, 0, nil),
		{frameStdout, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff},
		{frameStdout, 0, 0, 0, 1, 0, 0, 0, 9, 'x'},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const budget = 8
		ps := newProtoSandbox(3, budget)
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			fr, err := readFrame(r, maxAgentFrame)
			if err != nil {
				break
			}
			var before [2]int
			var p *Process
			if int(fr.id) >= 1 && int(fr.id) <= len(ps.procs) {
				p = ps.procs[fr.id-1]
				before = [2]int{ps.out[fr.id-1][0].Len(), ps.out[fr.id-1][1].Len()}
			}
			wasRunning, wasDone := p != nil && p.running, p != nil && closed(p.Done())
			if err := ps.dispatch(fr); err != nil {
				if !closed(ps.Done()) {
					ps.markDead(err)
				}
				break
			}
			if p != nil && (fr.typ == frameStdout || fr.typ == frameStderr) && (!wasRunning || wasDone) {
				after := [2]int{ps.out[fr.id-1][0].Len(), ps.out[fr.id-1][1].Len()}
				if after != before {
					t.Fatalf("output reached process %d outside its run", fr.id)
				}
			}
		}
		for i := range ps.out {
			if ps.out[i][0].Len() > budget || ps.out[i][1].Len() > budget {
				t.Fatalf("process %d got %d+%d bytes, budget %d", i+1, ps.out[i][0].Len(), ps.out[i][1].Len(), budget)
			}
		}
		if c := ps.Cwd(); c != WorkspaceDir && !validCwd(c) {
			t.Fatalf("took directory %q", c)
		}
	})
}
