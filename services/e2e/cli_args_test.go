package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runConch runs the conch binary with env added to a clean environment
// and returns its stdout, stderr and exit code.
func runConch(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return runConchInput(t, env, "", args...)
}

// runConchInput is runConch with stdin.
func runConchInput(t *testing.T, env []string, stdin string, args ...string) (string, string, int) {
	t.Helper()
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// Flags may follow the arguments, "--" ends them, and conch sandbox exec
// exits with the command's own status (124 when it timed out).
func TestCLIFlagsAnywhere(t *testing.T) {
	d := startDev(t)
	env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
	out, errOut, code := runConch(t, env, "sandbox", "create")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: %q %q %d", out, errOut, code)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantOut  string
		wantErr  string
		wantCode int
	}{
		{"a flag after the id", []string{"exec", id, "--env", "FOO=bar", "echo $FOO"}, "bar\n", "", 0},
		{"a flag at the end", []string{"exec", id, "echo $FOO", "--env", "FOO=baz"}, "baz\n", "", 0},
		{"-- ends the flags", []string{"exec", "--env", "A=1", id, "--", "echo", "--env", "B=2", "$A"}, "--env B=2 1\n", "", 0},
		{"the command's exit status", []string{"exec", id, "--", "exit", "3"}, "", "", 3},
		{"a timeout", []string{"exec", "--timeout", "1", id, "sleep 5"}, "", "conch: command timed out\n", 124},
		{"an unknown flag", []string{"exec", id, "--envv", "A=1", "true"}, "",
			"conch sandbox exec: unknown flag --envv; did you mean --env? (see 'conch sandbox exec --help'; a flag of the command goes after --: conch sandbox exec ID -- ls -la)\n", 2},
		{"an unknown command", []string{"exce", id, "true"}, "",
			"conch sandbox: unknown command \"exce\"; did you mean \"exec\"? (see 'conch sandbox --help')\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runConch(t, env, append([]string{"sandbox"}, tc.args...)...)
			if out != tc.wantOut || errOut != tc.wantErr || code != tc.wantCode {
				t.Errorf("conch sandbox %q: stdout %q stderr %q code %d, want %q %q %d", tc.args, out, errOut, code, tc.wantOut, tc.wantErr, tc.wantCode)
			}
		})
	}

	// A table has a header.
	out, errOut, code = runConch(t, env, "sandbox", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "STATE") || !strings.HasPrefix(lines[1], id) {
		t.Errorf("sandbox list: %q %q %d", out, errOut, code)
	}
}

// A mistyped command is one line, with a suggestion, and exit code 2.
func TestCLIUnknownCommand(t *testing.T) {
	out, errOut, code := runConch(t, nil, "sandbx", "list")
	if want := "conch: unknown command \"sandbx\"; did you mean \"sandbox\"? (see 'conch --help')\n"; out != "" || errOut != want || code != 2 {
		t.Errorf("conch sandbx: %q %q %d, want stderr %q and code 2", out, errOut, code, want)
	}
	out, errOut, code = runConch(t, nil, "dev", "--htp-addr", "127.0.0.1:0")
	if want := "conch dev: unknown flag --htp-addr; did you mean --http-addr? (see 'conch dev --help')\n"; out != "" || errOut != want || code != 2 {
		t.Errorf("conch dev --htp-addr: %q %q %d, want stderr %q and code 2", out, errOut, code, want)
	}
}

// Ctrl-C stops a client command with exit code 130 and no "context
// canceled" line.
func TestCLIInterruptExitCode(t *testing.T) {
	d := startDev(t)
	env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
	out, errOut, code := runConch(t, env, "sandbox", "create")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: %q %q %d", out, errOut, code)
	}
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "sandbox", "exec", id, "--", "echo", "started;", "sleep", "30")
	cmd.Env = append(cleanEnv(), env...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupted once the command runs: its process is listed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := d.call("GET", "/api/v1/sandboxes/"+id+"/processes", d.Key, nil)
		if strings.Contains(string(body), "sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command never ran: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 || stderr.String() != "" || time.Since(start) > 10*time.Second {
		t.Errorf("interrupted exec: %v after %v, stderr %q; want exit code 130 at once and nothing said", err, time.Since(start), stderr.String())
	}
}
