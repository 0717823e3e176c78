package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// conch login stores the server and the key for the user; flags and the
// environment still come first; conch logout forgets them.
func TestCLILogin(t *testing.T) {
	d := startDev(t)
	config := t.TempDir()
	// No ./.conch to fall back on: only what login stored can serve.
	base := []string{"XDG_CONFIG_HOME=" + config, "HOME=" + t.TempDir(), "CONCH_DATA_DIR=" + t.TempDir()}
	stored := filepath.Join(config, "conch", "config.json")

	// A key the server refuses is not stored.
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "login", "--server", d.URL)
	cmd.Env = append(cleanEnv(), base...)
	cmd.Stdin = strings.NewReader("conch_not-a-key-at-all\n")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "refused the key") {
		t.Errorf("login with a wrong key: %v\n%s", err, out)
	}
	if _, err := os.Stat(stored); !os.IsNotExist(err) {
		t.Fatalf("a refused key was stored: %v", err)
	}

	// The key on stdin keeps it out of the shell's history.
	cmd = exec.CommandContext(t.Context(), bin, "login", "--server", d.URL)
	cmd.Env = append(cleanEnv(), base...)
	cmd.Stdin = strings.NewReader(d.Key + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("login: %v\n%s", err, out)
	}
	st, err := os.Stat(stored)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stored credentials: %v %v, want mode 0600", st, err)
	}

	for _, tc := range []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"the stored server and key", nil, nil, 0, ""},
		{"the environment's key before the stored one", []string{"CONCH_API_KEY=conch_wrong-key-0123456789"}, nil, 1, "invalid API key"},
		{"the flag's key before all", []string{"CONCH_API_KEY=" + d.Key}, []string{"--api-key", "conch_wrong-key-0123456789"}, 1, "invalid API key"},
		{"the stored key only goes to the stored server", []string{"CONCH_URL=http://127.0.0.1:1"}, nil, 1, "no API key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := runConch(t, append(append([]string(nil), base...), tc.env...), append([]string{"sandbox", "list"}, tc.args...)...)
			if code != tc.wantCode || !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("sandbox list: code %d stderr %q, want %d and %q", code, errOut, tc.wantCode, tc.wantErr)
			}
		})
	}

	if out, errOut, code := runConch(t, base, "logout"); code != 0 {
		t.Fatalf("logout: %q %q %d", out, errOut, code)
	}
	if _, err := os.Stat(stored); !os.IsNotExist(err) {
		t.Errorf("credentials left after logout: %v", err)
	}
	if _, errOut, code := runConch(t, base, "sandbox", "list", "--server", d.URL); code != 1 || !strings.Contains(errOut, "no API key") {
		t.Errorf("after logout: code %d stderr %q", code, errOut)
	}
}
