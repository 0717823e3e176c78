package seal

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func mustKey(t *testing.T, id string) Key {
	t.Helper()
	k, err := GenerateKey(id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustRing(t *testing.T, active Key, older ...Key) *Keyring {
	t.Helper()
	r, err := NewKeyring(active, older...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSealOpens(t *testing.T) {
	t.Parallel()
	k1 := mustKey(t, "k1")
	r := mustRing(t, k1)
	ad := Bind("conch/gateways/acme/prod", "upstream.api_key")
	for _, plain := range [][]byte{nil, []byte("x"), []byte("sk-0123456789abcdef"), bytes.Repeat([]byte{0, 0xff, '\n'}, 5000)} {
		sealed, err := r.Seal(plain, ad)
		if err != nil {
			t.Fatal(err)
		}
		if len(plain) > 4 && bytes.Contains(sealed, plain) {
			t.Fatalf("sealed value holds the plain text: %q", sealed)
		}
		if id, ok := KeyID(sealed); !ok || id != "k1" {
			t.Fatalf("KeyID = %q, %v; want k1", id, ok)
		}
		got, err := r.Open(sealed, ad)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("Open = %q, %v; want %q", got, err, plain)
		}
		again, _ := r.Seal(plain, ad)
		if bytes.Equal(again, sealed) {
			t.Fatal("two seals of one value are equal: the data key or nonce is not fresh")
		}
	}
}

// After a rotation the new key seals and the old one still opens; without
// the old key, what it sealed does not open.
func TestRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := mustKey(t, "k1"), mustKey(t, "k2")
	before := mustRing(t, k1)
	after := mustRing(t, k2, k1)
	ad := Bind("k", "f")
	old, _ := before.Seal([]byte("secret"), ad)
	if got, err := after.Open(old, ad); err != nil || string(got) != "secret" {
		t.Fatalf("rotated keyring opens the old value = %q, %v", got, err)
	}
	if after.Current(string(old)) || !before.Current(string(old)) {
		t.Fatal("Current must hold for the active key's values only")
	}
	fresh, _ := after.Seal([]byte("secret"), ad)
	if id, _ := KeyID(fresh); id != "k2" || !after.Current(string(fresh)) {
		t.Fatalf("rotated keyring seals with %q, want k2", id)
	}
	if _, err := mustRing(t, k2).Open(old, ad); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("open without the old key = %v, want ErrUnknownKey", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	k1, k2 := mustKey(t, "k1"), mustKey(t, "k2")
	r := mustRing(t, k1, k2)
	ad := Bind("conch/gateways/acme/prod", "upstream.api_key")
	sealed, err := r.Seal([]byte("sk-secret"), ad)
	if err != nil {
		t.Fatal(err)
	}
	s := string(sealed)
	id, enc, _ := strings.Cut(strings.TrimPrefix(s, prefix), ":")
	body, _ := base64.RawURLEncoding.DecodeString(enc)
	flip := func(i int) string {
		b := bytes.Clone(body)
		b[i] ^= 1
		return prefix + id + ":" + base64.RawURLEncoding.EncodeToString(b)
	}
	imposter := mustKey(t, "k1") // same id, another secret
	tests := []struct {
		name   string
		ring   *Keyring
		sealed string
		ad     []byte
		want   error
	}{
		{"wrong associated data: another account", r, s, Bind("conch/gateways/other/prod", "upstream.api_key"), ErrNoOpen},
		{"wrong associated data: another field", r, s, Bind("conch/gateways/acme/prod", "tools.webhooks[0].headers[Authorization]"), ErrNoOpen},
		{"no associated data", r, s, nil, ErrNoOpen},
		{"key id the keyring lacks", mustRing(t, k2), s, ad, ErrUnknownKey},
		{"another key of the same id", mustRing(t, imposter), s, ad, ErrNoOpen},
		{"relabelled to another key id", r, prefix + "k2:" + enc, ad, ErrNoOpen},
		{"tampered wrap nonce", r, flip(0), ad, ErrNoOpen},
		{"tampered wrapped data key", r, flip(nonceLen + 3), ad, ErrNoOpen},
		{"tampered data nonce", r, flip(nonceLen + wrappedLen), ad, ErrNoOpen},
		{"tampered ciphertext", r, flip(nonceLen + wrappedLen + nonceLen), ad, ErrNoOpen},
		{"tampered tag", r, flip(len(body) - 1), ad, ErrNoOpen},
		{"truncated", r, prefix + id + ":" + base64.RawURLEncoding.EncodeToString(body[:minBody-1]), ad, ErrNotSealed},
		{"not base64", r, prefix + id + ":@@@", ad, ErrNotSealed},
		{"bad key id", r, prefix + "k 1:" + enc, ad, ErrNotSealed},
		{"not sealed at all", r, "sk-secret", ad, ErrNotSealed},
		{"another version", r, "sealed:v2:" + id + ":" + enc, ad, ErrNotSealed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.ring.Open([]byte(tt.sealed), tt.ad)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open = %q, %v; want %v", got, err, tt.want)
			}
			if got != nil {
				t.Fatalf("Open returned %q with its error", got)
			}
		})
	}
}

func TestOpenStored(t *testing.T) {
	t.Parallel()
	r := mustRing(t, mustKey(t, "k1"))
	ad := Bind("key", "field")
	sealed, _ := r.SealString("hunter2", ad)
	elsewhere, _ := r.SealString("hunter2", Bind("another key", "field"))
	tests := []struct {
		name, stored, want string
		wantErr            error
	}{
		{"sealed", sealed, "hunter2", nil},
		{"stored before sealing", "hunter2", "hunter2", nil},
		{"empty", "", "", nil},
		{"sealed for elsewhere is not taken as plain", elsewhere, "", ErrNoOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := r.OpenStored(tt.stored, ad)
			if !errors.Is(err, tt.wantErr) || got != tt.want {
				t.Fatalf("OpenStored = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	if r.Current("hunter2") || !r.Current("") || !r.Current(sealed) {
		t.Fatal("Current: a plain value needs sealing, an empty one does not, the active key's is current")
	}
}

func TestBindIsUnambiguous(t *testing.T) {
	t.Parallel()
	if bytes.Equal(Bind("a", "bc"), Bind("ab", "c")) || bytes.Equal(Bind("a"), Bind("a", "")) {
		t.Fatal("Bind gives the same bytes for different parts")
	}
}
