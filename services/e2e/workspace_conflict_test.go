package e2e

import (
	"net/http"
	"strings"
	"testing"
)

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
