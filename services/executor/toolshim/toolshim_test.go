package toolshim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallAndRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var calls []string
	backend := func(_ context.Context, req Request) (string, bool, error) {
		tool, args := req.Tool, req.Arguments
		calls = append(calls, tool+" "+args)
		switch {
		case strings.Contains(args, "fail"):
			return "backend is down", true, nil
		case strings.Contains(args, "gone"):
			return "", false, errors.New("sandbox has no tools")
		}
		return "id,name\n1,Ann\n", false, nil
	}
	tools := []Tool{{Name: "get_users", Description: "List users.", Schema: []byte(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)}}
	h, err := Install(dir, "/run/conch/agent", os.Getuid(), tools, backend, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, n := range []string{"get_users", "get-users"} {
		if target, err := os.Readlink(filepath.Join(dir, n)); err != nil || target != "/run/conch/agent" {
			t.Errorf("command %s -> %q, %v", n, target, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, SocketFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket = %v, %v; want mode 0600", fi, err)
	}

	tests := []struct {
		name, as    string
		args        []string
		code        int
		out, errOut string
	}{
		{"output to stdout", "get-users", []string{"--q", "x"}, 0, "1,Ann", ""},
		{"underscore name", "get_users", []string{"--q=x"}, 0, "id,name", ""},
		{"help", "get-users", []string{"--help"}, 0, "List users.", ""},
		{"usage error", "get-users", []string{"--nope"}, 2, "", "unknown flag --nope"},
		{"missing required", "get-users", nil, 2, "", "missing required flag --q"},
		{"failed tool", "get-users", []string{"--q", "fail"}, 1, "", "backend is down"},
		{"call not made", "get-users", []string{"--q", "gone"}, 1, "", "sandbox has no tools"},
		{"not a tool", "rm", nil, 127, "", "not a tool"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code := Run(dir, tt.as, tt.args, &out, &errOut)
		if code != tt.code || !strings.Contains(out.String(), tt.out) || !strings.Contains(errOut.String(), tt.errOut) {
			t.Errorf("%s: exit %d stdout %q stderr %q; want %d, %q, %q", tt.name, code, out.String(), errOut.String(), tt.code, tt.out, tt.errOut)
		}
	}
	if len(calls) != 4 {
		t.Errorf("calls = %q, want 4 (usage errors never call)", calls)
	}

	// The socket serves only listed tools, whatever a client sends.
	ans, err := call(filepath.Join(dir, SocketFile), Request{Tool: "rm_rf", Arguments: "{}"})
	if err != nil || !strings.Contains(ans.Error, "not a tool of this sandbox") {
		t.Errorf("unlisted tool = %+v, %v", ans, err)
	}
}

func TestCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(`{"tools":[{"name":"get_users"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		argv0 string
		ok    bool
	}{
		{"/run/conch/tools/get-users", true},
		{"get_users", true},
		{"/usr/bin/conch", false},
		{"/run/conch/agent", false},
		{"conch-dev", false},
		{"ls", false},
	}
	for _, tt := range tests {
		if _, ok := Command(tt.argv0, dir); ok != tt.ok {
			t.Errorf("Command(%q) = %v, want %v", tt.argv0, ok, tt.ok)
		}
	}
	if _, ok := Command("get_users", t.TempDir()); ok {
		t.Error("Command without a manifest must be false")
	}
}
