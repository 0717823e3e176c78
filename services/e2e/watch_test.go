package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// lines reads r's lines into a channel, for a process that runs on.
func lines(r io.Reader) <-chan string {
	out := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			out <- sc.Text()
		}
		close(out)
	}()
	return out
}

// waitLine waits for a line of c holding want, and returns what came
// before it too.
func waitLine(t *testing.T, c <-chan string, want string) []string {
	t.Helper()
	var seen []string
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-c:
			if !ok {
				t.Fatalf("ended before %q; got %q", want, seen)
			}
			seen = append(seen, l)
			if strings.Contains(l, want) {
				return seen
			}
		case <-deadline:
			t.Fatalf("no %q in 30s; got %q", want, seen)
		}
	}
}

// A sandbox's file changes as server-sent events, read with curl, and
// with conch sandbox watch.
func TestWatchFiles(t *testing.T) {
	d := startDev(t)
	status, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	var sb struct{ ID string }
	if err := json.Unmarshal(body, &sb); status != 200 || err != nil {
		t.Fatalf("create = %d %s", status, body)
	}
	run := func(cmd string) {
		t.Helper()
		if status, body := d.call("POST", "/api/v1/sandboxes/"+sb.ID+"/commands", d.Key, map[string]any{"command": cmd}); status != 200 || !strings.Contains(string(body), `"exit_code":0`) {
			t.Fatalf("%s = %d %s", cmd, status, body)
		}
	}
	run("mkdir src")

	curl := exec.CommandContext(t.Context(), "curl", "-sSN", "-H", "Authorization: Bearer "+d.Key, d.URL+"/api/v1/sandboxes/"+sb.ID+"/watch?recursive=true")
	out, err := curl.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := curl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = curl.Process.Kill(); _ = curl.Wait() })
	events := lines(out)
	waitLine(t, events, `{"path":"/home/workspace"}`)
	run("echo x > src/a && mv src/a src/b && rm src/b")
	for _, want := range []string{
		`data: {"op":"create","path":"/home/workspace/src/a"}`,
		`data: {"op":"rename","path":"/home/workspace/src/b"}`,
		`data: {"op":"remove","path":"/home/workspace/src/b"}`,
	} {
		seen := waitLine(t, events, want)
		if prev := seen[len(seen)-2]; prev != "event: change" {
			t.Errorf("%s came after %q, want event: change", want, prev)
		}
	}

	env := []string{"CONCH_URL=" + d.URL, "CONCH_API_KEY=" + d.Key}
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cli := exec.CommandContext(t.Context(), bin, "sandbox", "watch", "-r", sb.ID, "/home/workspace/src")
	cli.Env = append(cleanEnv(), env...)
	cliOut, err := cli.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cliErr, err := cli.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Process.Kill(); _ = cli.Wait() })
	waitLine(t, lines(cliErr), "watching /home/workspace/src")
	run("mkdir src/deep && echo y > src/deep/c")
	waitLine(t, lines(cliOut), "create /home/workspace/src/deep/c")

	for _, tc := range []struct {
		name, path, key string
		want            int
	}{
		{"relative", "/watch?path=src", d.Key, http.StatusBadRequest},
		{"not a directory", "/watch?path=/etc/hostname", d.Key, http.StatusBadRequest},
		{"recursive neither true nor false", "/watch?recursive=maybe", d.Key, http.StatusBadRequest},
		{"no key", "/watch", "", http.StatusUnauthorized},
	} {
		if status, body := d.call("GET", "/api/v1/sandboxes/"+sb.ID+tc.path, tc.key, nil); status != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.want)
		}
	}
	if status, body := d.call("GET", "/api/v1/sandboxes/sb-nope/watch", d.Key, nil); status != http.StatusNotFound {
		t.Errorf("no sandbox: %d %s", status, body)
	}
}
