package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFilesCLI drives `conch files` against conch dev.
func TestFilesCLI(t *testing.T) {
	d := startDev(t)
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, error) {
		cmd := exec.CommandContext(t.Context(), bin, append([]string{"files"}, args...)...)
		cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key, "CONCH_USER_ID=cli-user")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	dir := t.TempDir()
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	local := filepath.Join(dir, "data.bin")
	if err := os.WriteFile(local, data, 0o600); err != nil {
		t.Fatal(err)
	}

	if out, errOut, err := run("put", "--progress", "always", local, "/in/data.bin"); err != nil || !strings.Contains(out, "/in/data.bin") || !strings.Contains(errOut, "100%") {
		t.Fatalf("put: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	if _, _, err := run("mkdir", "/in/sub"); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	out, _, err := run("ls", "/in")
	if err != nil || !strings.HasPrefix(out, "TYPE ") || !strings.Contains(out, "data.bin") || !strings.Contains(out, "3145728") || !strings.Contains(out, "sub/") {
		t.Fatalf("ls: %v\n%s", err, out)
	}
	// Flags stand anywhere: before the command, between, after the path.
	for _, args := range [][]string{{"ls", "-o", "json", "/in"}, {"ls", "/in", "-o", "json"}, {"-o", "json", "ls", "/in"}} {
		out, _, err = run(args...)
		var listing struct{ Entries []struct{ Name string } }
		if err != nil || json.Unmarshal([]byte(out), &listing) != nil || len(listing.Entries) != 2 {
			t.Fatalf("files %v: %v\n%s", args, err, out)
		}
	}
	got := filepath.Join(dir, "got.bin")
	if _, errOut, err := run("get", "--progress", "never", "/in/data.bin", got); err != nil || errOut != "" {
		t.Fatalf("get: %v %s", err, errOut)
	}
	if b, err := os.ReadFile(got); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("downloaded content differs (%v)", err)
	}
	out, _, err = run("url", "-expires", "10m", "/in/data.bin")
	if err != nil || !strings.HasPrefix(out, d.URL+"/public/v1/files/") {
		t.Fatalf("url: %v\n%s", err, out)
	}
	resp, err := http.Get(strings.SplitN(out, "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(b, data) {
		t.Fatalf("public URL = %d, %d bytes", resp.StatusCode, len(b))
	}

	// Errors print the server's message and exit non-zero; a failed get
	// leaves no file behind.
	missing := filepath.Join(dir, "missing")
	if _, errOut, err := run("get", "/nope", missing); err == nil || !strings.Contains(errOut, "no such file") {
		t.Fatalf("get missing: %v %s", err, errOut)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("failed get left %s", missing)
	}
	// The CLI's user is told the flag, not the REST parameter.
	if _, errOut, err := run("rm", "/in"); err == nil || !strings.Contains(errOut, "delete with -r (conch files rm -r /in)") || strings.Contains(errOut, "recursive=") {
		t.Fatalf("rm without -r: %v %s", err, errOut)
	}
	if out, _, err := run("rm", "-r", "/in"); err != nil || !strings.Contains(out, "3 entries") {
		t.Fatalf("rm -r: %v %s", err, out)
	}
	if _, errOut, err := run("ls", "/../x"); err == nil || !strings.Contains(errOut, "..") {
		t.Fatalf("ls traversal: %v %s", err, errOut)
	}
	cmd := exec.CommandContext(t.Context(), bin, "files", "ls")
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--user") {
		t.Fatalf("ls without a user: %v %s", err, out)
	}
}
