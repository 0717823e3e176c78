package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// The server and the key come from the flags, then the environment, then
// conch login's file, then the defaults; the stored key goes only to the
// stored server.
func TestNewClientPrecedence(t *testing.T) {
	const stored, flagURL, envURL = "https://stored.example", "https://flag.example", "https://env.example"
	for _, tc := range []struct {
		name       string
		flagServer string
		flagKey    string
		env        map[string]string
		noStored   bool
		dataDirKey string
		wantServer string
		wantKey    string
		wantErr    bool
	}{
		{name: "stored", wantServer: stored, wantKey: "stored-key"},
		{name: "flags first", flagServer: flagURL, flagKey: "flag-key", env: map[string]string{"CONCH_URL": envURL, "CONCH_API_KEY": "env-key"}, wantServer: flagURL, wantKey: "flag-key"},
		{name: "env before the file", env: map[string]string{"CONCH_URL": envURL, "CONCH_API_KEY": "env-key"}, wantServer: envURL, wantKey: "env-key"},
		{name: "env key, stored server", env: map[string]string{"CONCH_API_KEY": "env-key"}, wantServer: stored, wantKey: "env-key"},
		{name: "the stored server named again", flagServer: stored + "/", wantServer: stored, wantKey: "stored-key"},
		{name: "the stored key never goes elsewhere", flagServer: flagURL, dataDirKey: "dir-key", wantServer: flagURL, wantKey: "dir-key"},
		{name: "no key for another server", env: map[string]string{"CONCH_URL": envURL}, wantErr: true},
		{name: "nothing stored: the data dir", noStored: true, dataDirKey: "dir-key", wantServer: DefaultServer, wantKey: "dir-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_CONFIG_HOME", t.TempDir())
			t.Setenv("HOME", t.TempDir())
			t.Setenv("CONCH_URL", "")
			t.Setenv("CONCH_API_KEY", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if !tc.noStored {
				if _, err := saveCredentials(Credentials{Server: stored, APIKey: "stored-key"}); err != nil {
					t.Fatal(err)
				}
			}
			dataDir := t.TempDir()
			if tc.dataDirKey != "" {
				if err := os.WriteFile(filepath.Join(dataDir, "api-key"), []byte(tc.dataDirKey+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c, err := NewClient(&Options{Server: tc.flagServer, APIKey: tc.flagKey, DataDir: dataDir, Output: "text"})
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got a client for %s with key %q, want an error", c.base, c.key)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.base != tc.wantServer || c.key != tc.wantKey {
				t.Errorf("server %q key %q, want %q %q", c.base, c.key, tc.wantServer, tc.wantKey)
			}
		})
	}
}

// conch login's file is the user's alone.
func TestSaveCredentialsMode(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	path, err := saveCredentials(Credentials{Server: "https://x.example", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, st.Mode().Perm(), want)
		}
	}
	got, err := loadCredentials()
	if err != nil || got != (Credentials{Server: "https://x.example", APIKey: "k"}) {
		t.Errorf("loadCredentials = %+v %v", got, err)
	}
}
