package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// referencePath is the committed reference, from this package's directory.
var referencePath = filepath.Join("..", "..", "..", "docs", "reference", "configuration.md")

// The committed reference is what the generator writes now: a setting
// added, removed or reworded without `make gen` fails here.
func TestConfigurationReferenceIsCurrent(t *testing.T) {
	t.Parallel()
	want, err := configurationReference()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v: run make gen", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/reference/configuration.md differs from the settings' tags: run make gen and commit it")
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"conch secrets rotate": "conch-secrets-rotate",
		"conch etcd-pki":       "conch-etcd-pki",
		"etcd client":          "etcd-client",
		"Account quotas":       "account-quotas",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
