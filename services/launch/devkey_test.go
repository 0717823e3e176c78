package launch

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
)

// conch dev makes its key once, private to its user, and keeps it.
func TestDevSecretsKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := DevConfig{DataDir: dir}
	kc, err := devSecretsKey(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "secrets-key")
	if kc.SecretsKeyFile != path {
		t.Fatalf("dev keyring from %q, want %s", kc.SecretsKeyFile, path)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secrets key file: %v, %v; want mode 0600", fi, err)
	}
	first, _ := os.ReadFile(path)
	keys, err := kc.Keyring()
	if err != nil || keys.ActiveID() != "dev" {
		t.Fatalf("dev keyring = %v, %v", keys, err)
	}
	if _, err := devSecretsKey(cfg); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(first, again) {
		t.Fatal("a second start replaced the key")
	}

	// A configured keyring wins, and no file is made.
	other := t.TempDir()
	given := DevConfig{DataDir: other}
	given.SecretsKey = sealtest.KeyText(t)
	if kc, err := devSecretsKey(given); err != nil || kc.SecretsKey != given.SecretsKey {
		t.Fatalf("configured keyring = %+v, %v", kc, err)
	}
	if _, err := os.Stat(filepath.Join(other, "secrets-key")); !os.IsNotExist(err) {
		t.Fatalf("a key file was made beside a configured keyring: %v", err)
	}

	// A damaged key file is an error naming it, never replaced.
	if err := os.WriteFile(path, []byte("dev:short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := devSecretsKey(cfg); err == nil || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Fatalf("damaged key file = %v, want an error naming --secrets-key-file", err)
	}
}
