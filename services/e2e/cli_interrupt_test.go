package e2e

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// ptyChat is conch chat run on a terminal, as a person runs it.
type ptyChat struct {
	t   *testing.T
	cmd *exec.Cmd
	tty *os.File
	out *lockedBuffer
	// read is closed when the terminal has nothing more to say.
	read chan struct{}
}

func startPtyChat(t *testing.T, d *dev, args ...string) *ptyChat {
	t.Helper()
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"chat"}, args...)...)
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key)
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	c := &ptyChat{t: t, cmd: cmd, tty: tty, out: &lockedBuffer{}, read: make(chan struct{})}
	go func() {
		defer close(c.read)
		_, _ = io.Copy(c.out, tty)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = tty.Close()
	})
	return c
}

// waitFor waits until the terminal shows want n times in all.
func (c *ptyChat) waitFor(want string, n int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for strings.Count(c.out.String(), want) < n {
		if time.Now().After(deadline) {
			c.t.Fatalf("terminal shows %q fewer than %d times after %v:\n%s", want, n, timeout, c.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *ptyChat) send(s string) {
	c.t.Helper()
	if _, err := c.tty.Write([]byte(s)); err != nil {
		c.t.Fatal(err)
	}
}

// exitCode waits for conch chat to end and returns its exit code.
func (c *ptyChat) exitCode(timeout time.Duration) int {
	c.t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			c.t.Fatal(err)
		}
		return 0
	case <-time.After(timeout):
		c.t.Fatalf("conch chat still running after %v:\n%s", timeout, c.out.String())
		return -1
	}
}

// Ctrl-C in conch chat cancels the command under way, not the chat: the
// prompt comes back at once and the next turn works; Ctrl-D then leaves
// with code 0.
func TestChatCtrlCCancelsTheTurn(t *testing.T) {
	d := startDev(t)
	c := startPtyChat(t, d, "--shell")
	c.waitFor("you> ", 1, 30*time.Second)
	c.send("run: sleep 30\r")
	c.waitFor("sleep 30", 2, 30*time.Second) // the echo of the line, then the call
	start := time.Now()
	c.send("\x03")
	c.waitFor("[interrupted]", 1, 10*time.Second)
	c.waitFor("you> ", 2, 10*time.Second)
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("the prompt came back %v after Ctrl-C", waited)
	}
	c.send("run: echo after-$((40+2))\r")
	c.waitFor("after-42", 1, 30*time.Second)
	c.waitFor("you> ", 3, 30*time.Second)
	if strings.Contains(c.out.String(), "interrupt signal received") {
		t.Errorf("a turn after Ctrl-C failed:\n%s", c.out.String())
	}
	c.send("\x04")
	if code := c.exitCode(30 * time.Second); code != 0 {
		t.Errorf("Ctrl-D: exit code %d, want 0\n%s", code, c.out.String())
	}
}

// Ctrl-C at the prompt asks for a second one, which leaves with code 130.
func TestChatCtrlCTwiceAtThePromptLeaves(t *testing.T) {
	d := startDev(t)
	c := startPtyChat(t, d)
	c.waitFor("you> ", 1, 30*time.Second)
	c.send("\x03")
	c.waitFor("Ctrl-C again", 1, 10*time.Second)
	c.waitFor("you> ", 2, 10*time.Second)
	c.send("\x03")
	if code := c.exitCode(30 * time.Second); code != 130 {
		t.Errorf("Ctrl-C twice: exit code %d, want 130\n%s", code, c.out.String())
	}
}
