package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
)

// TestPipeStreams hands a command's stdout, then another's stdin, to the
// host as pipes: every byte arrives, stderr and the exit status still come
// from the agent.
func TestPipeStreams(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})

	t.Run("stdout", func(t *testing.T) {
		out := new(streams)
		p, err := sb.Start(Options{
			Command: "head -c 5000000 /dev/urandom | tee /tmp/sent; echo done >&2; exit 3", Budget: -1, Pipe: wire.PipeStdout,
			OnOutput: out.add,
		})
		if err != nil {
			t.Fatal(err)
		}
		f, err := p.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		<-p.Done()
		if x := p.Exit(); x.Code != 3 || x.Err != nil {
			t.Fatalf("exit = %+v, want 3", x)
		}
		if stdout, stderr := out.strings(); stdout != "" || stderr != "done\n" {
			t.Errorf("OnOutput had stdout %q (a piped command's must not reach it), stderr %q", stdout, stderr)
		}
		sum := sha256.Sum256(got)
		r := sh(t, sb, "sha256sum < /tmp/sent")
		if len(got) != 5000000 || !strings.HasPrefix(r.stdout, hex.EncodeToString(sum[:])) {
			t.Fatalf("read %d bytes hashing %x; the command sent %s", len(got), sum, r.stdout)
		}
	})

	t.Run("stdin", func(t *testing.T) {
		data := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
		out := new(streams)
		p, err := sb.Start(Options{Command: "sha256sum", Budget: -1, Pipe: wire.PipeStdin, OnOutput: out.add})
		if err != nil {
			t.Fatal(err)
		}
		f, err := p.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		// The command sees its end of input only once the host's end is
		// closed: the agent kept no copy of it.
		f.Close()
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the command never saw the end of its input")
		}
		sum := sha256.Sum256(data)
		if stdout, _ := out.strings(); !strings.HasPrefix(stdout, hex.EncodeToString(sum[:])) {
			t.Fatalf("the command hashed %q, want %x", stdout, sum)
		}
	})

	// A command that has ended before the host takes its pipe leaves it
	// to be taken all the same: the agent keeps its end until told.
	t.Run("commands that end at once", func(t *testing.T) {
		for i := range 100 {
			p, err := sb.Start(Options{Command: "printf " + strconv.Itoa(i), Budget: -1, Pipe: wire.PipeStdout, OnOutput: func(Stream, []byte) {}})
			if err != nil {
				t.Fatal(err)
			}
			f, err := p.Pipe()
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
			b, err := io.ReadAll(f)
			f.Close()
			if err != nil || string(b) != strconv.Itoa(i) {
				t.Fatalf("round %d: read %q, %v", i, b, err)
			}
			<-p.Done()
			if x := p.Exit(); x.Code != 0 || x.Err != nil {
				t.Fatalf("round %d: %+v", i, x)
			}
		}
	})

	t.Run("a killed command's pipe ends", func(t *testing.T) {
		p, err := sb.Start(Options{Command: "sleep 1000", Budget: -1, Pipe: wire.PipeStdout, OnOutput: func(Stream, []byte) {}})
		if err != nil {
			t.Fatal(err)
		}
		f, err := p.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_ = p.Kill()
		if _, err := io.ReadAll(f); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("never on a terminal", func(t *testing.T) {
		for _, o := range []Options{{Command: "true", Pty: true, Pipe: wire.PipeStdout}, {Command: "true", Pipe: "stderr"}} {
			if _, err := sb.Start(o); err == nil {
				t.Errorf("Start(%+v) accepted", o)
			}
		}
	})

	t.Run("not for a command without one", func(t *testing.T) {
		p, err := sb.Start(Options{Command: "true", OnOutput: func(Stream, []byte) {}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Pipe(); err == nil {
			t.Error("Pipe of a command started without one succeeded")
		}
		<-p.Done()
	})
}

// TestTakePipe plays an agent holding a regular file on fd 0 and a pipe's
// write end on fd 1: the host takes a pipe only, and what it takes is a
// file of its own on that pipe.
func TestTakePipe(t *testing.T) {
	t.Parallel()
	file, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	// The fake bubblewrap's only child is the fake agent, with its fds.
	cmd := exec.Command("/bin/sh", "-c", "sleep 60; exit 0")
	cmd.Stdin, cmd.Stdout = file, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	s := &Sandbox{cmd: cmd}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if fd, err := s.agentPidfd(); err == nil {
			unix.Close(fd)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake agent never started")
		}
		time.Sleep(10 * time.Millisecond)
	}

	for _, c := range []struct {
		name string
		fd   int
		want error
	}{
		{"a regular file", 0, errNotPipe},
		{"no such fd", 99, unix.EBADF},
		{"a negative fd", -1, unix.EBADF},
	} {
		if _, err := s.takePipe(c.fd, wire.PipeStdout); !errors.Is(err, c.want) {
			t.Errorf("%s: took %v, want %v", c.name, err, c.want)
		}
	}

	f, err := s.takePipe(1, wire.PipeStdin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fl&unix.O_ACCMODE != unix.O_WRONLY {
		t.Errorf("the taken pipe's mode is %#o, want write only", fl&unix.O_ACCMODE)
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b := make([]byte, 5)
	if _, err := io.ReadFull(pr, b); err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v", b, err)
	}
}

// TestPipeReports plays an agent reporting a piped process's start: a
// report without a pipe, or not one, breaks the protocol; a pipe the host
// cannot take fails that process alone.
func TestPipeReports(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		payload   []byte
		violation bool
	}{
		{"no pipe reported", nil, true},
		{"report not JSON", []byte("{"), true},
		{"a negative fd", []byte(`{"pipe_fd":-1}`), true},
		{"a pipe the host cannot take", []byte(`{"pipe_fd":5}`), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ps := newProtoSandbox(1, -1)
			ps.in = wire.NewWriter(io.Discard)
			p := ps.procs[0]
			p.opts.Pipe = wire.PipeStdout
			err := ps.dispatch(wire.Frame{Type: wire.FrameStarted, ID: 1, Payload: c.payload})
			if (err != nil) != c.violation {
				t.Fatalf("dispatch = %v, want a violation: %v", err, c.violation)
			}
			if c.violation {
				return
			}
			if _, err := p.Pipe(); err == nil {
				t.Fatal("a pipe the host could not take was handed on")
			}
		})
	}
}
