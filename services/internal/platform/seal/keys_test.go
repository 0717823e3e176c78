package seal

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/config/configtest"
)

// Fixed keys, so that the tests can check no error shows them.
var (
	secretA = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("A"), 32))
	secretB = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("B"), 32))
)

func TestParseKeys(t *testing.T) {
	t.Parallel()
	short := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("S"), 16))
	tests := []struct {
		name       string
		text       string
		wantActive string
		wantErr    string // "" means valid
	}{
		{"one key", "k1:" + secretA, "k1", ""},
		{"one key, newline ended", "k1:" + secretA + "\n", "k1", ""},
		{"unpadded base64", "k1:" + strings.TrimRight(secretA, "="), "k1", ""},
		{"lines, the first active", "k2:" + secretB + "\nk1:" + secretA + "\n", "k2", ""},
		{"comments and blank lines", "# keys of conch\n\n  k2:" + secretB + "  \n# old\nk1:" + secretA, "k2", ""},
		{"commas", "k2:" + secretB + ", k1:" + secretA, "k2", ""},
		{"CRLF lines", "k2:" + secretB + "\r\nk1:" + secretA + "\r\n", "k2", ""},
		{"empty", "", "", "no key"},
		{"only comments", "# nothing\n\n", "", "no key"},
		{"no colon", secretA, "", "key 1: want id:base64key"},
		{"empty id", ":" + secretA, "", "key 1: want id:base64key"},
		{"bad id", "k 1:" + secretA, "", "key 1: want id:base64key"},
		{"long id", strings.Repeat("k", 33) + ":" + secretA, "", "key 1: want id:base64key"},
		{"id twice", "k1:" + secretA + "\nk1:" + secretB, "", `key 2: id "k1" given twice`},
		{"not base64", "k1:not*base64", "", "key 1 (k1): not standard base64"},
		{"url-safe base64", "k1:" + strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb, 0xff}, 16))), "", "key 1 (k1): not standard base64"},
		{"16 bytes", "k1:" + short, "", "key 1 (k1): 16 bytes, want 32"},
		{"hex, not base64", "k1:" + hex.EncodeToString(bytes.Repeat([]byte("A"), 32)), "", "key 1 (k1): 48 bytes, want 32"},
		{"second key bad", "k1:" + secretA + "\nk2:" + short, "", "key 2 (k2): 16 bytes"},
		{"no key after id", "k1:", "", "key 1 (k1): 0 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseKeys(tt.text)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseKeys = %v", err)
				}
				if r.ActiveID() != tt.wantActive {
					t.Fatalf("active = %s, want %s", r.ActiveID(), tt.wantActive)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseKeys = %v, want an error with %q", err, tt.wantErr)
			}
			for _, s := range []string{secretA, secretB, short, strings.TrimRight(secretA, "=")} {
				if strings.Contains(err.Error(), s) {
					t.Fatalf("error shows a key: %v", err)
				}
			}
		})
	}
}

// Every key of a parsed keyring opens what it sealed, and the first seals.
func TestParsedKeysSealAndOpen(t *testing.T) {
	t.Parallel()
	k1, k2 := mustKey(t, "k1"), mustKey(t, "k2")
	old, _ := mustRing(t, k1).SealString("v", nil)
	r, err := ParseKeys(FormatKey(k2) + "\n" + FormatKey(k1) + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.OpenStored(old, nil); err != nil || got != "v" {
		t.Fatalf("open with the parsed older key = %q, %v", got, err)
	}
	if !r.Current(mustSeal(t, r, "v")) || r.ActiveID() != "k2" {
		t.Fatal("the first key of the text must seal")
	}
}

func mustSeal(t *testing.T, r *Keyring, v string) string {
	t.Helper()
	s, err := r.SealString(v, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestKeyPrintsNoSecret(t *testing.T) {
	t.Parallel()
	k := mustKey(t, "k1")
	enc := strings.TrimPrefix(FormatKey(k), "k1:")
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(verb, k); strings.Contains(out, enc) || strings.Contains(out, string(k.secret)) || !strings.Contains(out, "k1") {
			t.Errorf("Sprintf(%q, key) = %q: shows the secret, or not the id", verb, out)
		}
	}
}

func TestNewKeyringRefuses(t *testing.T) {
	t.Parallel()
	k1 := mustKey(t, "k1")
	if _, err := NewKeyring(Key{ID: "k0"}); err == nil {
		t.Error("a key without a secret was accepted")
	}
	if _, err := NewKeyring(k1, k1); err == nil {
		t.Error("one id twice was accepted")
	}
	if _, err := GenerateKey("bad id"); err == nil {
		t.Error("a bad id was accepted")
	}
}

func TestKeyConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good", "# conch\nk2:"+secretB+"\nk1:"+secretA+"\n")
	bad := file("bad", "k1:short\n")
	configtest.ErrorsNameTheField(t, func() any { return &KeyConfig{} }, []configtest.Case{
		{Name: "file", Args: []string{"--secrets-key-file", good}},
		{Name: "file from env", Env: []string{"CONCH_SECRETS_KEY_FILE=" + good}},
		{Name: "key from env", Env: []string{"CONCH_SECRETS_KEY=k1:" + secretA}},
		{Name: "keys from env, commas", Env: []string{"CONCH_SECRETS_KEY=k2:" + secretB + ",k1:" + secretA}},
		{Name: "none", WantField: "CONCH_SECRETS_KEY"},
		{Name: "both", Args: []string{"--secrets-key-file", good}, Env: []string{"CONCH_SECRETS_KEY=k1:" + secretA}, WantField: "--secrets-key-file"},
		{Name: "missing file", Args: []string{"--secrets-key-file", filepath.Join(dir, "nope")}, WantField: "--secrets-key-file"},
		{Name: "bad file", Args: []string{"--secrets-key-file", bad}, WantField: "--secrets-key-file"},
		{Name: "bad env", Env: []string{"CONCH_SECRETS_KEY=k1:short"}, WantField: "CONCH_SECRETS_KEY"},
	})
	c := KeyConfig{SecretsKeyFile: good}
	r, err := c.Keyring()
	if err != nil || r.ActiveID() != "k2" {
		t.Fatalf("Keyring = %v, %v; want k2 active", r, err)
	}
}
