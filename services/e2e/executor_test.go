package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSandboxREST drives sandboxes through the router's REST API and the
// conch sandbox CLI, as a user of conch dev would.
func TestSandboxREST(t *testing.T) {
	d := startDev(t)

	code, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{})
	if code != http.StatusOK {
		t.Fatalf("create = %d %s", code, body)
	}
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(body, &created); err != nil || !strings.HasPrefix(created.ID, "sb-") {
		t.Fatalf("create body %s (%v)", body, err)
	}
	cmdPath := "/api/v1/sandboxes/" + created.ID + "/commands"

	cases := []struct {
		name string
		body map[string]any
		want string // the shell's exact result (docs/reference/openai-api.md)
	}{
		{"exit", map[string]any{"command": "echo hi; echo oops >&2; exit 2"},
			`{"outcome":{"exit_code":2,"type":"exit"},"stderr":"oops\n","stdout":"hi\n"}`},
		{"zero exit code is emitted", map[string]any{"command": "cd /tmp && true"},
			`{"outcome":{"exit_code":0,"type":"exit"},"stderr":"","stdout":""}`},
		{"cwd persists", map[string]any{"command": "pwd"},
			`{"outcome":{"exit_code":0,"type":"exit"},"stderr":"","stdout":"/tmp\n"}`},
		{"camelCase input and truncation", map[string]any{"command": "printf 'ééééé'", "maxOutputLength": 2},
			`{"outcome":{"exit_code":0,"type":"exit"},"stderr":"","stdout":"éé\n[output truncated]"}`},
		{"timeout", map[string]any{"command": "echo start; sleep 60", "timeout_seconds": 1},
			`{"outcome":{"type":"timeout"},"stderr":"","stdout":"start\n"}`},
		{"too long", map[string]any{"command": strings.Repeat("x", 1<<20+1)},
			`{"error":"command is 1048577 bytes, longer than the limit of 1048576 bytes (1 MiB)","outcome":{"type":"error"},"stderr":"","stdout":""}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := d.call("POST", cmdPath, d.Key, c.body)
			if code != http.StatusOK {
				t.Fatalf("run = %d %s", code, body)
			}
			var got, want any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			_ = json.Unmarshal([]byte(c.want), &want)
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(want)
			if !bytes.Equal(gb, wb) {
				t.Fatalf("got %s, want %s", gb, wb)
			}
		})
	}

	bad := []struct {
		name string
		body map[string]any
		code int
		msg  string
	}{
		{"PATH in env", map[string]any{"command": "true", "env": map[string]string{"PATH": "/tmp"}}, 400, "PATH may not be set"},
		{"LD_PRELOAD in env", map[string]any{"command": "true", "env": map[string]string{"LD_PRELOAD": "/tmp/x.so"}}, 400, "LD_PRELOAD"},
		{"timeout out of range", map[string]any{"command": "true", "timeout_seconds": 0.5}, 400, ""},
		{"timeout too long", map[string]any{"command": "true", "timeout_seconds": 301}, 400, "timeout_seconds"},
	}
	for _, c := range bad {
		t.Run("rejects "+c.name, func(t *testing.T) {
			code, body := d.call("POST", cmdPath, d.Key, c.body)
			if code != c.code || !strings.Contains(string(body), c.msg) {
				t.Fatalf("= %d %s, want %d containing %q", code, body, c.code, c.msg)
			}
		})
	}

	t.Run("another account sees nothing", func(t *testing.T) {
		code, body := d.call("POST", "/api/v1/accounts", d.Key, map[string]string{"name": "Other"})
		if code != http.StatusOK {
			t.Fatalf("create account = %d %s", code, body)
		}
		var acct struct{ ID string }
		_ = json.Unmarshal(body, &acct)
		code, body = d.call("POST", "/api/v1/accounts/"+acct.ID+"/keys", d.Key, map[string]string{})
		var key struct{ Key string }
		if err := json.Unmarshal(body, &key); code != http.StatusOK || err != nil {
			t.Fatalf("create key = %d %s", code, body)
		}
		for _, call := range []struct{ method, path string }{
			{"POST", cmdPath}, {"GET", "/api/v1/sandboxes/" + created.ID}, {"DELETE", "/api/v1/sandboxes/" + created.ID},
			{"GET", "/api/v1/sandboxes/" + created.ID + "/processes"},
		} {
			code, body := d.call(call.method, call.path, key.Key, map[string]any{"command": "cat /etc/hostname"})
			if code != http.StatusNotFound {
				t.Errorf("%s %s as another account = %d %s, want 404", call.method, call.path, code, body)
			}
		}
		code, body = d.call("GET", "/api/v1/sandboxes", key.Key, nil)
		if code != http.StatusOK || strings.Contains(string(body), created.ID) {
			t.Errorf("other account lists %d %s", code, body)
		}
	})

	t.Run("cli", func(t *testing.T) {
		bin, err := conchBin()
		if err != nil {
			t.Fatal(err)
		}
		conch := func(args ...string) (string, string, int) {
			t.Helper()
			cmd := exec.CommandContext(t.Context(), bin, append([]string{"sandbox"}, args...)...)
			cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatal(err)
			}
			return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
		}
		id, stderr, code := conch("create")
		id = strings.TrimSpace(id)
		if code != 0 || !strings.HasPrefix(id, "sb-") {
			t.Fatalf("create: %q %q %d", id, stderr, code)
		}
		if out, _, code := conch("exec", id, "echo", "from", "cli", ">", "f;", "cat", "f"); out != "from cli\n" || code != 0 {
			t.Fatalf("exec: %q %d", out, code)
		}
		if out, errOut, code := conch("exec", id, "echo bad >&2; exit 7"); out != "" || errOut != "bad\n" || code != 7 {
			t.Fatalf("failing exec: %q %q %d", out, errOut, code)
		}
		if _, errOut, code := conch("exec", "--env", "LD_PRELOAD=x", id, "true"); code == 0 || !strings.Contains(errOut, "LD_PRELOAD") {
			t.Fatalf("exec with LD_PRELOAD: %q %d", errOut, code)
		}
		if _, errOut, code := conch("rm", id); code != 0 {
			t.Fatalf("rm: %q %d", errOut, code)
		}
		if _, errOut, code := conch("exec", id, "true"); code == 0 || !strings.Contains(errOut, "not found") {
			t.Fatalf("exec after rm: %q %d", errOut, code)
		}
	})

	t.Run("persistent workspace", func(t *testing.T) {
		code, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{"user": "alice", "persistent": true})
		if code != http.StatusOK {
			t.Fatalf("persistent create = %d %s", code, body)
		}
		var sb struct{ ID string }
		_ = json.Unmarshal(body, &sb)
		d.call("POST", "/api/v1/sandboxes/"+sb.ID+"/commands", d.Key, map[string]any{"command": "echo kept > notes.txt && ln -s /etc/shadow leak"})
		// The file API sees the flushed files at once; the symlink is a symlink.
		code, body = d.call("GET", "/api/v1/shell/io/list?path=/", d.Key, nil, "X-Shell-User-Id", "alice")
		if code != http.StatusOK || !strings.Contains(string(body), `"path":"/notes.txt"`) || !strings.Contains(string(body), `"link_target":"/etc/shadow"`) {
			t.Fatalf("file API after flush = %d %s", code, body)
		}
		d.call("DELETE", "/api/v1/sandboxes/"+sb.ID, d.Key, nil)
		_, body = d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{"user": "alice", "persistent": true})
		_ = json.Unmarshal(body, &sb)
		code, body = d.call("POST", "/api/v1/sandboxes/"+sb.ID+"/commands", d.Key, map[string]any{"command": "cat notes.txt; readlink leak"})
		d.call("DELETE", "/api/v1/sandboxes/"+sb.ID, d.Key, nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"stdout":"kept\n/etc/shadow\n"`) {
			t.Fatalf("workspace did not persist: %d %s", code, body)
		}
	})

	code, body = d.call("DELETE", "/api/v1/sandboxes/"+created.ID, d.Key, nil)
	if code != http.StatusOK {
		t.Fatalf("delete = %d %s", code, body)
	}
	code, body = d.call("POST", cmdPath, d.Key, map[string]any{"command": "true"})
	if code != http.StatusNotFound {
		t.Fatalf("run after delete = %d %s", code, body)
	}
}

// TestSandboxDeletedCwd deletes a command's own working directory: the
// next command starts in /home/workspace, says why on stderr, and the
// sandbox goes on working.
func TestSandboxDeletedCwd(t *testing.T) {
	d := startDev(t)
	id := newSandbox(t, d, map[string]any{})
	type result struct {
		Stdout  string `json:"stdout"`
		Stderr  string `json:"stderr"`
		Outcome struct {
			Type     string `json:"type"`
			ExitCode int    `json:"exit_code"`
		} `json:"outcome"`
	}
	run := func(command string) result {
		t.Helper()
		code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": command})
		if code != http.StatusOK {
			t.Fatalf("%q = %d %s", command, code, body)
		}
		var r result
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatalf("%q: %s: %v", command, body, err)
		}
		if r.Outcome.Type != "exit" || r.Outcome.ExitCode != 0 {
			t.Fatalf("%q: %s", command, body)
		}
		return r
	}

	run("mkdir d && cd d && rmdir ../d")
	r := run("pwd")
	const note = "conch: working directory /home/workspace/d no longer exists; starting in /home/workspace\n"
	if r.Stdout != "/home/workspace\n" || r.Stderr != note {
		t.Fatalf("after deleting the cwd: %+v", r)
	}
	// The fallback became the cwd: no note again, and commands work.
	if r := run("echo kept > f && cat f && pwd"); r.Stdout != "kept\n/home/workspace\n" || r.Stderr != "" {
		t.Fatalf("later command: %+v", r)
	}
	if r := run("mkdir -p e && cd e && pwd"); r.Stdout != "/home/workspace/e\n" {
		t.Fatalf("cd after the fallback: %+v", r)
	}
	if r := run("pwd"); r.Stdout != "/home/workspace/e\n" || r.Stderr != "" {
		t.Fatalf("cwd after the fallback: %+v", r)
	}
	if code, body := d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("delete = %d %s", code, body)
	}
}

// TestSandboxMountTableHidesHost reads the mount table from inside a sandbox
// of conch dev: it names no host path of the executor and not its pid.
func TestSandboxMountTableHidesHost(t *testing.T) {
	d := startDev(t)
	id := newSandbox(t, d, map[string]any{})
	code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key,
		map[string]any{"command": "cat /proc/self/mountinfo /proc/self/mounts", "max_output_length": 1 << 20})
	var r struct {
		Stdout string `json:"stdout"`
	}
	if err := json.Unmarshal(body, &r); code != http.StatusOK || err != nil || !strings.Contains(r.Stdout, " /home/workspace ") {
		t.Fatalf("read mount table = %d %s (%v)", code, body, err)
	}
	for _, leak := range []string{"/run/conch-executor", d.DataDir, id} {
		if strings.Contains(r.Stdout, leak) {
			t.Errorf("mount table shows %q:\n%s", leak, r.Stdout)
		}
	}
	pid := strconv.Itoa(d.cmd.Process.Pid)
	for _, n := range regexp.MustCompile(`[0-9]+`).FindAllString(r.Stdout, -1) {
		if n == pid {
			t.Fatalf("mount table shows the executor's pid %s:\n%s", pid, r.Stdout)
		}
	}
}
