package executor

import (
	"strings"
	"sync"
	"testing"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

// A terminal is a login shell: keystrokes in, its output out, a resize
// seen by the programs it runs, and its exit status at the end.
func TestTerminal(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	id := createSandbox(t, x, "acme")
	stream, err := x.client.Terminal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(m *executorv1.TerminalRequest) {
		t.Helper()
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var out strings.Builder
	var exit *executorv1.TerminalExit
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			mu.Lock()
			if e := m.GetExit(); e != nil {
				exit = e
			}
			out.Write(m.GetOutput())
			mu.Unlock()
		}
	}()
	waitFor := func(s string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			o := out.String()
			mu.Unlock()
			if strings.Contains(o, s) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q in %q", s, o)
			}
		}
	}
	send(&executorv1.TerminalRequest{Message: &executorv1.TerminalRequest_Start{Start: &executorv1.TerminalStart{SandboxId: id, Size: &executorv1.TerminalSize{Rows: 30, Cols: 90}}}})
	send(&executorv1.TerminalRequest{Message: &executorv1.TerminalRequest_Input{Input: []byte("echo hi-$((1+1)); stty size; tty\n")}})
	waitFor("30 90")
	send(&executorv1.TerminalRequest{Message: &executorv1.TerminalRequest_Resize{Resize: &executorv1.TerminalSize{Rows: 40, Cols: 120}}})
	send(&executorv1.TerminalRequest{Message: &executorv1.TerminalRequest_Input{Input: []byte("stty size; exit 3\n")}})
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the terminal did not end")
	}
	mu.Lock()
	o := out.String()
	mu.Unlock()
	if !strings.Contains(o, "hi-2") || !strings.Contains(o, "30 90") || !strings.Contains(o, "40 120") || !strings.Contains(o, "/dev/pts/") {
		t.Errorf("terminal output %q", o)
	}
	if exit == nil || exit.GetExitCode() != 3 {
		t.Errorf("exit %v", exit)
	}

	// A bad size, and another account's sandbox, are refused.
	for _, c := range []struct {
		ctxAccount string
		start      *executorv1.TerminalStart
		want       string
	}{
		{"acme", &executorv1.TerminalStart{SandboxId: id, Size: &executorv1.TerminalSize{Rows: 0, Cols: 80}}, "rows and cols"},
		{"other", &executorv1.TerminalStart{SandboxId: id}, "not found"},
	} {
		s, err := x.client.Terminal(as(t, c.ctxAccount))
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Send(&executorv1.TerminalRequest{Message: &executorv1.TerminalRequest_Start{Start: c.start}})
		if _, err := s.Recv(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.start, err, c.want)
		}
	}
}
