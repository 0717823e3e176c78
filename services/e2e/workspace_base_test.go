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

	// Replaced under the same name after the sandbox loaded it, then
	// deleted by the sandbox: the new content stays, and the command is
	// told.
	if r := run("echo mine > r.txt"); r.Outcome.Type == "error" {
		t.Fatalf("write: %+v", r)
	}
	if code, body := c.upload("/r.txt", strings.NewReader("replaced"), -1); code != http.StatusOK {
		t.Fatalf("upload = %d %s", code, body)
	}
	r := run("rm r.txt")
	if r.Outcome.Type == "error" || !strings.Contains(r.Stderr, "conch: /home/workspace/r.txt: kept: changed in the workspace since this sandbox loaded it") {
		t.Fatalf("rm of a replaced file = %+v, want a kept note on stderr", r)
	}
	if resp, body := c.download("/r.txt"); resp.StatusCode != http.StatusOK || string(body) != "replaced" {
		t.Fatalf("the replaced file = %d %q, want it kept", resp.StatusCode, body)
	}
	// Deleting what the sandbox itself wrote still deletes it.
	if r := run("echo own > own.txt && rm own.txt"); r.Outcome.Type == "error" || r.Stderr != "" {
		t.Fatalf("own write and delete: %+v", r)
	}
	if r := run("echo own > own.txt"); r.Outcome.Type == "error" {
		t.Fatalf("write: %+v", r)
	}
	if r := run("rm own.txt"); r.Outcome.Type == "error" || r.Stderr != "" {
		t.Fatalf("delete of the sandbox's own flushed file: %+v", r)
	}
	if c.size("/own.txt") != -1 {
		t.Fatal("the sandbox's own file outlived its delete")
	}
}
