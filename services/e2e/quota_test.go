package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sandboxResult is the part of a command's result the quota tests read.
type sandboxResult struct {
	Outcome               struct{ Type string }
	Stdout, Stderr, Error string
}

// sandboxRunner creates a persistent sandbox of user and returns a
// function running a command in it.
func sandboxRunner(t *testing.T, d *dev, user string) func(command string) sandboxResult {
	t.Helper()
	id := persistentSandbox(t, d, user)
	return func(command string) sandboxResult {
		t.Helper()
		code, body := d.call("POST", "/api/v1/sandboxes/"+id+"/commands", d.Key, map[string]any{"command": command})
		if code != http.StatusOK {
			t.Fatalf("%q = %d %s", command, code, body)
		}
		var r sandboxResult
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatalf("%q: %v in %s", command, err, body)
		}
		return r
	}
}

// size is the stored size of p, -1 when absent.
func (c *fileClient) size(p string) int64 {
	c.t.Helper()
	code, body := c.call("GET", "/api/v1/shell/io/stat?path="+p, nil)
	if code == http.StatusNotFound {
		return -1
	}
	var out struct{ Size int64 }
	if code != http.StatusOK || json.Unmarshal(body, &out) != nil {
		c.t.Fatalf("stat %s = %d %s", p, code, body)
	}
	return out.Size
}

// TestWorkspaceQuota holds the persistent quota to what is stored: the
// file API answers 413, a shell command that writes past it gets an error
// result naming the quota and loses nothing stored before, sparse files
// count their whole length, and a workspace over its quota (stored under a
// larger one) still opens in a sandbox where files can be deleted.
func TestWorkspaceQuota(t *testing.T) {
	const mib = 1 << 20
	dir := t.TempDir()
	d := startDevIn(t, dir, "CONCH_WORKSPACE_QUOTA_BYTES=16777216")
	c := &fileClient{t: t, d: d, key: d.Key, user: "quota"}
	six := bytes.Repeat([]byte("q"), 6*mib)
	for _, p := range []string{"/a", "/b"} {
		if code, body := c.upload(p, bytes.NewReader(six), int64(len(six))); code != http.StatusOK {
			t.Fatalf("upload %s within the quota = %d %s", p, code, body)
		}
	}
	for _, size := range []int64{int64(len(six)), -1} {
		code, body := c.upload("/c", bytes.NewReader(six), size)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "workspace quota exceeded") || !strings.Contains(string(body), `"code":"workspace_quota_exceeded"`) {
			t.Fatalf("upload past the quota (size %d) = %d %s, want 413 workspace_quota_exceeded", size, code, body)
		}
	}
	if c.size("/c") != -1 {
		t.Fatal("a refused upload was stored")
	}

	run := sandboxRunner(t, d, "quota")
	if r := run("truncate -s 3M sparse1 && du -k sparse1"); r.Outcome.Type == "error" || !strings.HasPrefix(r.Stdout, "0\t") {
		t.Fatalf("a sparse file within the quota: %+v", r)
	}
	if got := c.size("/sparse1"); got != 3*mib {
		t.Fatalf("the sparse file is stored as %d bytes, want its length", got)
	}
	// 15 MiB stored: another 3 MiB sparse file, empty in the sandbox, is
	// past the quota all the same.
	r := run("truncate -s 3M sparse2 && echo written")
	if r.Outcome.Type != "error" || !strings.Contains(r.Error, "workspace quota exceeded") {
		t.Fatalf("a command writing past the quota: %+v, want an error naming the quota", r)
	}
	if c.size("/sparse2") != -1 || c.size("/a") != 6*mib || c.size("/b") != 6*mib || c.size("/sparse1") != 3*mib {
		t.Fatal("a refused flush changed what was stored")
	}

	// The same workspace under a smaller quota is over it.
	if _, err := d.stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	d = startDevIn(t, dir, "CONCH_WORKSPACE_QUOTA_BYTES=8388608")
	c.d, c.key = d, d.Key
	run = sandboxRunner(t, d, "quota")
	if r := run("ls"); !strings.Contains(r.Stdout, "sparse1") || !strings.Contains(r.Stdout, "a\n") {
		t.Fatalf("the over-quota workspace did not hydrate: %+v", r)
	}
	if r := run("echo more > more"); r.Outcome.Type != "error" || !strings.Contains(r.Error, "workspace quota exceeded") {
		t.Fatalf("growing an over-quota workspace: %+v", r)
	}
	if r := run("rm more a sparse1"); r.Outcome.Type == "error" {
		t.Fatalf("deleting in an over-quota workspace: %+v", r)
	}
	if c.size("/a") != -1 || c.size("/sparse1") != -1 || c.size("/b") != 6*mib {
		t.Fatal("the deletions were not saved")
	}
	if code, body := c.call("DELETE", "/api/v1/shell/io/delete?path=/b", nil); code != http.StatusOK {
		t.Fatalf("delete through the file API = %d %s", code, body)
	}
}

// TestGatewayWorkspaceQuota: a gateway's smaller persistent quota holds
// its sandboxes' flushes, while the default gateway's allows the same
// write. A sparse file takes no room in the sandbox, so only the quota
// by stored bytes can refuse it.
func TestGatewayWorkspaceQuota(t *testing.T) {
	d := startDev(t)
	const write = "truncate -s 2M big && echo written"
	for _, g := range []struct {
		name   string
		limits map[string]any
		user   string
	}{
		{"small", map[string]any{"workspace_bytes": 1 << 20}, "small-user"},
		{"roomy", nil, "roomy-user"},
	} {
		shell := map[string]any{"enabled": true, "allow_data_persistence": true}
		if g.limits != nil {
			shell["limits"] = g.limits
		}
		up := turnScript(t, write)
		createGateway(t, d, map[string]any{"name": g.name, "shell": shell,
			"upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"}})
		res, _ := completeShell(t, d, g.name, map[string]any{"user": g.user})
		if len(res) != 1 {
			t.Fatalf("%s: results = %+v", g.name, res)
		}
		c := &fileClient{t: t, d: d, key: d.Key, user: g.user}
		if g.limits != nil {
			if res[0].Outcome.Type != "error" || !strings.Contains(res[0].Error, "workspace quota exceeded") {
				t.Errorf("%s: a 2 MiB file under a 1 MiB quota = %+v, want workspace quota exceeded", g.name, res[0])
			}
			if c.size("/big") != -1 {
				t.Errorf("%s: the file past the quota was stored", g.name)
			}
			continue
		}
		if res[0].Outcome.Type == "error" || c.size("/big") != 2<<20 {
			t.Errorf("%s: the default quota refused 2 MiB: %+v", g.name, res[0])
		}
	}
}
