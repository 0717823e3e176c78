package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestFileDirectoryConflictLosesNothing: the file API writes one kind of
// entry at a path (a file, or a directory) while a live sandbox, with a
// command running, makes the other kind there. The sandbox's flushes and
// its DELETE go on; its tree takes the path, and what the file API wrote
// is kept beside it as d.conflict-<time>. Nothing either side wrote is
// lost, the running command's later writes included.
func TestFileDirectoryConflictLosesNothing(t *testing.T) {
	d := startDev(t)
	for _, tc := range []struct {
		name string
		// apiPath is where the file API writes "from the api" (at d or
		// below it); shell makes the other kind at d.
		apiPath, shell string
		// shellFile is the file of the sandbox holding "shell\n";
		// aside is where the API's content is found below d.conflict-….
		shellFile, aside string
	}{
		{name: "api file, shell directory", apiPath: "/d", shell: "mkdir d && echo shell > d/inside", shellFile: "/d/inside", aside: ""},
		{name: "api directory, shell file", apiPath: "/d/inside", shell: "echo shell > d", shellFile: "/d", aside: "/inside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user := strings.ReplaceAll(tc.name, " ", "")
			user = strings.ReplaceAll(user, ",", "-")
			c := &fileClient{t: t, d: d, key: d.Key, user: user}
			id := persistentSandbox(t, d, user)
			run := func(command string) sandboxResult {
				t.Helper()
				code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": command, "timeout_seconds": 60})
				var r sandboxResult
				if code != http.StatusOK || json.Unmarshal(body, &r) != nil {
					t.Errorf("%q = %d %s", command, code, body)
				}
				return r
			}
			// A command that runs through the conflict and writes after it.
			var wg sync.WaitGroup
			var late sandboxResult
			wg.Go(func() { late = run("while [ ! -e go ]; do sleep 0.05; done; echo late > late") })

			if code, body := c.upload(tc.apiPath, strings.NewReader("from the api"), -1); code != http.StatusOK {
				t.Fatalf("upload %s = %d %s", tc.apiPath, code, body)
			}
			r := run(tc.shell)
			if r.Outcome.Type == "error" || !strings.Contains(r.Stderr, "conch: /home/workspace/d: kept: ") || !strings.Contains(r.Stderr, "d.conflict-") {
				t.Errorf("%q over the file API's write = %+v, want it saved with a kept note naming d.conflict-…", tc.shell, r)
			}
			if r := run("echo after > after && touch go"); r.Outcome.Type == "error" || r.Stderr != "" {
				t.Errorf("a write after the conflict = %+v", r)
			}
			wg.Wait()
			if late.Outcome.Type == "error" {
				t.Errorf("the command running through the conflict = %+v", late)
			}
			if code, body := d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil); code != http.StatusOK {
				t.Fatalf("DELETE of the sandbox = %d %s", code, body)
			}

			want := map[string]string{tc.shellFile: "shell\n", "/after": "after\n", "/late": "late\n"}
			var aside []string
			for _, name := range c.list("/") {
				if strings.HasPrefix(name, "d.conflict-") {
					aside = append(aside, strings.TrimSuffix(name, "/"))
				}
			}
			if len(aside) != 1 {
				t.Fatalf("the workspace holds %v, want one d.conflict-… beside d", c.list("/"))
			}
			want["/"+aside[0]+tc.aside] = "from the api"
			for p, content := range want {
				if resp, body := c.download(p); resp.StatusCode != http.StatusOK || string(body) != content {
					t.Errorf("%s = %d %q, want %q", p, resp.StatusCode, body, content)
				}
			}
			// A new sandbox of the user sees both sides.
			next := sandboxRunner(t, d, user)
			if r := next("cat late after " + tc.shellFile[1:] + " " + aside[0] + tc.aside); r.Stdout != "late\nafter\nshell\nfrom the api" {
				t.Errorf("a new sandbox reads %+v", r)
			}
		})
	}
}

// TestSandboxRemovalKeepsAnotherKind: a sandbox that deletes its
// directory, after the file API put a file at that path, deletes only
// what it had: the uploaded file stays, and the command is told.
func TestSandboxRemovalKeepsAnotherKind(t *testing.T) {
	d := startDev(t)
	c := &fileClient{t: t, d: d, key: d.Key, user: "kinds"}
	run := sandboxRunner(t, d, "kinds")
	if r := run("mkdir d && echo x > d/x"); r.Outcome.Type == "error" {
		t.Fatalf("mkdir: %+v", r)
	}
	if code, body := c.call("DELETE", "/api/v1/shell/io/delete?path=/d&recursive=true", nil); code != http.StatusOK {
		t.Fatalf("delete /d = %d %s", code, body)
	}
	if code, body := c.upload("/d", strings.NewReader("from the api"), -1); code != http.StatusOK {
		t.Fatalf("upload /d = %d %s", code, body)
	}
	r := run("rm -rf d && echo after > after")
	if r.Outcome.Type == "error" || !strings.Contains(r.Stderr, "conch: /home/workspace/d: kept: changed in the workspace since this sandbox loaded it") {
		t.Fatalf("rm -rf of the sandbox's directory = %+v, want a kept note", r)
	}
	for p, want := range map[string]string{"/d": "from the api", "/after": "after\n"} {
		if resp, body := c.download(p); resp.StatusCode != http.StatusOK || string(body) != want {
			t.Errorf("%s = %d %q, want %q", p, resp.StatusCode, body, want)
		}
	}
}

// TestFileAPIRacesSandboxFlushes races uploads through the file API
// with commands of a live sandbox making the other kind of entry at the
// same paths, both orders, while another command runs through them all.
// Every command saves, the DELETE succeeds, and everything acknowledged
// on either side is in the workspace once.
func TestFileAPIRacesSandboxFlushes(t *testing.T) {
	const rounds = 12
	d := startDev(t)
	const user = "racing"
	c := &fileClient{t: t, d: d, key: d.Key, user: user}
	id := persistentSandbox(t, d, user)
	run := func(command string) (sandboxResult, bool) {
		code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": command, "timeout_seconds": 60})
		var r sandboxResult
		if code != http.StatusOK || json.Unmarshal(body, &r) != nil || r.Outcome.Type == "error" {
			t.Errorf("%q = %d %s", command, code, body)
			return r, false
		}
		return r, true
	}
	var mu sync.Mutex
	var acked []string
	ack := func(line string) {
		mu.Lock()
		acked = append(acked, line)
		mu.Unlock()
	}
	var through sync.WaitGroup
	through.Go(func() {
		if _, ok := run("while [ ! -e go ]; do sleep 0.05; done; echo through > through"); ok {
			ack("through")
		}
	})
	var wg sync.WaitGroup
	for r := range rounds {
		api, shell := fmt.Sprintf("api %d", r), fmt.Sprintf("shell %d", r)
		apiPath, command := fmt.Sprintf("/r%d", r), fmt.Sprintf("mkdir r%d && echo '%s' > r%d/f", r, shell, r)
		if r%2 == 1 {
			apiPath, command = fmt.Sprintf("/r%d/f", r), fmt.Sprintf("echo '%s' > r%d", shell, r)
		}
		wg.Go(func() {
			// A directory already saved there refuses the upload: its
			// caller is told, nothing is lost.
			if code, _ := c.upload(apiPath, strings.NewReader(api+"\n"), -1); code == http.StatusOK {
				ack(api)
			}
		})
		wg.Go(func() {
			if _, ok := run(command); ok {
				ack(shell)
			}
		})
	}
	wg.Wait()
	run("touch go")
	through.Wait()
	if code, body := d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil); code != http.StatusOK {
		t.Fatalf("DELETE of the sandbox = %d %s", code, body)
	}
	next := sandboxRunner(t, d, user)
	r := next("find . -type f ! -name go -exec cat {} + | sort")
	got := strings.Fields(strings.ReplaceAll(r.Stdout, " ", "_"))
	want := make([]string, len(acked))
	for i, a := range acked {
		want[i] = strings.ReplaceAll(a, " ", "_")
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the workspace holds\n%q\nwant what was acknowledged, once each:\n%q", got, want)
	}
}
