package seal

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Key is a key-encryption key and its id. Printed, it shows its id only.
type Key struct {
	// ID names the key in every value it seals.
	ID     string
	secret []byte
}

// String returns the key's id, so that a key printed by mistake does not
// show its secret.
func (k Key) String() string { return k.ID }

// GoString is String, for %#v.
func (k Key) GoString() string { return "seal.Key{ID: " + fmt.Sprintf("%q", k.ID) + "}" }

var keyID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

func validID(id string) bool { return keyID.MatchString(id) }

// GenerateKey returns a new random key named id.
func GenerateKey(id string) (Key, error) {
	if !validID(id) {
		return Key{}, fmt.Errorf("seal: key id %q: want 1-32 characters of [A-Za-z0-9_-]", id)
	}
	secret := make([]byte, keySize)
	_, _ = rand.Read(secret) // crypto/rand.Read never returns an error
	return Key{ID: id, secret: secret}, nil
}

// FormatKey returns k as a line of a key file: id:base64key.
func FormatKey(k Key) string {
	return k.ID + ":" + base64.StdEncoding.EncodeToString(k.secret)
}

// Keyring holds the active key, which seals, and older keys, which still
// open what they sealed.
type Keyring struct {
	active Key
	keys   map[string]Key
}

// NewKeyring returns a keyring that seals with active and opens with it
// and every key of older.
func NewKeyring(active Key, older ...Key) (*Keyring, error) {
	r := &Keyring{active: active, keys: map[string]Key{}}
	for _, k := range append([]Key{active}, older...) {
		if !validID(k.ID) || len(k.secret) != keySize {
			return nil, fmt.Errorf("seal: key %q: not a key (use GenerateKey or ParseKeys)", k.ID)
		}
		if _, dup := r.keys[k.ID]; dup {
			return nil, fmt.Errorf("seal: key id %q given twice", k.ID)
		}
		r.keys[k.ID] = k
	}
	return r, nil
}

// ActiveID returns the id of the key that seals.
func (r *Keyring) ActiveID() string { return r.active.ID }

// ParseKeys reads a keyring in its text form (see the package doc): keys
// as id:base64key, one per line or separated by commas, the first active.
// Errors name the key by its place and id, never its secret.
func ParseKeys(text string) (*Keyring, error) {
	var keys []Key
	seen := map[string]bool{}
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for entry := range strings.SplitSeq(line, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			n := len(keys) + 1
			id, enc, ok := strings.Cut(entry, ":")
			if !ok || !validID(id) {
				return nil, fmt.Errorf("key %d: want id:base64key, the id 1-32 characters of [A-Za-z0-9_-]", n)
			}
			if seen[id] {
				return nil, fmt.Errorf("key %d: id %q given twice", n, id)
			}
			seen[id] = true
			secret, err := decodeKey(enc)
			if err != nil {
				return nil, fmt.Errorf("key %d (%s): %w", n, id, err)
			}
			keys = append(keys, Key{ID: id, secret: secret})
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no key: want at least one id:base64key")
	}
	return NewKeyring(keys[0], keys[1:]...)
}

// decodeKey reads a key's secret: 32 bytes in standard base64, padded or
// not.
func decodeKey(enc string) ([]byte, error) {
	enc = strings.TrimRight(enc, "=")
	secret, err := base64.RawStdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return nil, errors.New("not standard base64 (make one with: head -c 32 /dev/urandom | base64)")
	}
	if len(secret) != keySize {
		return nil, fmt.Errorf("%d bytes, want %d (make one with: head -c 32 /dev/urandom | base64)", len(secret), keySize)
	}
	return secret, nil
}
