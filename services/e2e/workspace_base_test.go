package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestStaleDeleteKeepsUpload: a file uploaded into a directory after a
// sandbox hydrated survives the sandbox's `rm -rf` of that directory,
// which deletes only what the sandbox saw.
func TestStaleDeleteKeepsUpload(t *testing.T) {
	d := startDev(t)
	c := &fileClient{t: t, d: d, key: d.Key, user: "stale"}
	if code, body := c.upload("/d/seen.txt", strings.NewReader("seen"), -1); code != http.StatusOK {
		t.Fatalf("upload = %d %s", code, body)
	}
	run := sandboxRunner(t, d, "stale")
	if r := run("cat d/seen.txt"); r.Stdout != "seen" {
		t.Fatalf("the sandbox reads %+v", r)
	}
	if code, body := c.upload("/d/new.txt", strings.NewReader("uploaded later"), -1); code != http.StatusOK {
		t.Fatalf("upload = %d %s", code, body)
	}
	// A flush in between moves the sandbox's revision past the upload's;
	// it still never saw the file.
	if r := run("echo other > other.txt"); r.Outcome.Type == "error" {
		t.Fatalf("write: %+v", r)
	}
	if r := run("rm -rf d && ls"); r.Outcome.Type == "error" || strings.Contains(r.Stdout, "d\n") {
		t.Fatalf("rm -rf d: %+v", r)
	}
	if resp, body := c.download("/d/new.txt"); resp.StatusCode != http.StatusOK || string(body) != "uploaded later" {
		t.Fatalf("the file uploaded after the hydrate = %d %q, want it kept", resp.StatusCode, body)
	}
	if c.size("/d/seen.txt") != -1 {
		t.Fatal("the file the sandbox deleted is still stored")
	}
}
