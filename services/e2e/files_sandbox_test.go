package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestSandboxSeesFiles checks that a persistent sandbox and the file API
// share one workspace: what a command writes can be downloaded, and what
// is uploaded can be read by the next sandbox, links included.
func TestSandboxSeesFiles(t *testing.T) {
	d := startDev(t)
	c := &fileClient{t: t, d: d, key: d.Key, user: "carol"}
	sandbox := func() string {
		t.Helper()
		code, body := d.call("POST", "/api/v1/sandboxes", d.Key, map[string]any{"user": "carol", "persistent": true})
		if code != http.StatusOK {
			t.Fatalf("create sandbox = %d %s", code, body)
		}
		var sb struct{ ID string }
		if err := json.Unmarshal(body, &sb); err != nil || sb.ID == "" {
			t.Fatalf("create sandbox body %s", body)
		}
		return sb.ID
	}
	run := func(id, command string) string {
		t.Helper()
		code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": command})
		if code != http.StatusOK {
			t.Fatalf("%q = %d %s", command, code, body)
		}
		var out struct{ Stdout string }
		_ = json.Unmarshal(body, &out)
		return out.Stdout
	}

	if code, body := c.upload("/from-api/in.txt", strings.NewReader("uploaded\n"), -1); code != http.StatusOK {
		t.Fatalf("upload = %d %s", code, body)
	}
	id := sandbox()
	if got := run(id, "cat from-api/in.txt"); got != "uploaded\n" {
		t.Fatalf("sandbox reads %q, want the uploaded file", got)
	}
	run(id, "mkdir -p out/empty && printf 'from the shell' > out/made.txt && ln -s ../../../etc/passwd out/escape && rm from-api/in.txt")
	if code, body := d.call("DELETE", "/api/v1/sandboxes/"+id, d.Key, nil); code != http.StatusOK {
		t.Fatalf("delete sandbox = %d %s", code, body)
	}

	if resp, body := c.download("/out/made.txt"); resp.StatusCode != http.StatusOK || string(body) != "from the shell" {
		t.Fatalf("download of a file the shell wrote = %d %q", resp.StatusCode, body)
	}
	if got := c.list("/out"); strings.Join(got, ",") != "empty/,escape,made.txt" {
		t.Fatalf("list /out = %v", got)
	}
	code, body := c.call("GET", "/api/v1/shell/io/stat?path=/out/escape", nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"type":"symlink"`) || !strings.Contains(string(body), `"link_target":"../../../etc/passwd"`) {
		t.Fatalf("stat of the link = %d %s", code, body)
	}
	if resp, body := c.download("/out/escape"); resp.StatusCode != http.StatusBadRequest || strings.Contains(string(body), "root:") {
		t.Fatalf("download of a link = %d %s, want 400 and never the target", resp.StatusCode, body)
	}
	if code, _ := c.call("GET", "/api/v1/shell/io/stat?path=/from-api/in.txt", nil); code != http.StatusNotFound {
		t.Fatalf("a file the shell removed is still there: %d", code)
	}
}
