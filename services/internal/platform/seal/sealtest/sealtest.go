// Package sealtest makes keyrings for tests of code that stores secrets.
package sealtest

import (
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/seal"
)

// Keyring returns a keyring of one new random key, named "test".
func Keyring(t testing.TB) *seal.Keyring {
	t.Helper()
	k, err := seal.GenerateKey("test")
	if err != nil {
		t.Fatal(err)
	}
	r, err := seal.NewKeyring(k)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// KeyText returns a keyring of one new random key in its text form, as
// CONCH_SECRETS_KEY or a key file holds it.
func KeyText(t testing.TB) string {
	t.Helper()
	k, err := seal.GenerateKey("test")
	if err != nil {
		t.Fatal(err)
	}
	return seal.FormatKey(k)
}
