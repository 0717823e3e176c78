// Package signing makes and checks the tokens of temporary public file
// URLs: an HMAC-SHA256 over the account, user, path, content hash and
// expiry, with a key id so keys can be rotated (the first key signs, every
// configured key verifies).
package signing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// MaxTTL is the longest lifetime of a URL.
const MaxTTL = 7 * 24 * time.Hour

// DefaultTTL is the lifetime when none is asked for.
const DefaultTTL = time.Hour

// maxToken bounds what is parsed.
const maxToken = 4096

// Claims is what a token grants: reading one exact file until Expires.
type Claims struct {
	Account string `json:"a"`
	User    string `json:"u"`
	Path    string `json:"p"`
	// ETag pins the content: a replaced file is not served.
	ETag    string `json:"e"`
	Expires int64  `json:"x"`
}

// Key is one signing key.
type Key struct {
	ID     string
	Secret []byte
}

// Signer signs with its first key and verifies with all.
type Signer struct {
	keys []Key
	now  func() time.Time
}

var keyID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// ParseKeys parses "id:secret,id:secret"; each secret must be at least 32
// bytes.
func ParseKeys(s string) ([]Key, error) {
	var keys []Key
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, secret, ok := strings.Cut(part, ":")
		if !ok || !keyID.MatchString(id) {
			return nil, errors.New("signing keys: want id:secret pairs, id 1-32 characters of [A-Za-z0-9_-]")
		}
		if len(secret) < 32 {
			return nil, fmt.Errorf("signing keys: key %s: secret must be at least 32 bytes", id)
		}
		if seen[id] {
			return nil, fmt.Errorf("signing keys: key id %s given twice", id)
		}
		seen[id] = true
		keys = append(keys, Key{ID: id, Secret: []byte(secret)})
	}
	if len(keys) == 0 {
		return nil, errors.New("signing keys: at least one id:secret is required")
	}
	return keys, nil
}

// New returns a signer; keys[0] signs.
func New(keys []Key) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("signing: no keys")
	}
	return &Signer{keys: keys, now: time.Now}, nil
}

// Sign returns a token for c.
func (s *Signer) Sign(c Claims) (string, error) {
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("signing: %w", err)
	}
	k := s.keys[0]
	p := base64.RawURLEncoding.EncodeToString(payload)
	return k.ID + "." + p + "." + mac(k, p), nil
}

func mac(k Key, payload string) string {
	m := hmac.New(sha256.New, k.Secret)
	m.Write([]byte("conch-public-file-v1\x00" + k.ID + "\x00" + payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks a token and returns its claims. Any change to the token, an
// unknown key or an expired token is PermissionDenied.
func (s *Signer) Verify(token string) (Claims, error) {
	denied := func(why string) (Claims, error) {
		return Claims{}, errs.New(errs.PermissionDenied, "public URL %s", why)
	}
	if len(token) > maxToken {
		return denied("is not valid")
	}
	id, rest, ok := strings.Cut(token, ".")
	payload, sig, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return denied("is not valid")
	}
	var key *Key
	for i := range s.keys {
		if s.keys[i].ID == id {
			key = &s.keys[i]
		}
	}
	if key == nil || !hmac.Equal([]byte(sig), []byte(mac(*key, payload))) {
		return denied("is not valid")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(payload)
	if err != nil {
		return denied("is not valid")
	}
	var c Claims
	if err := json.Unmarshal(b, &c); err != nil {
		return denied("is not valid")
	}
	if s.now().Unix() >= c.Expires {
		return denied("has expired")
	}
	return c, nil
}

// TTL returns the lifetime for a request of seconds (0: the default).
func TTL(seconds int64) (time.Duration, error) {
	switch {
	case seconds == 0:
		return DefaultTTL, nil
	case seconds < 0 || seconds > int64(MaxTTL/time.Second):
		return 0, errs.New(errs.InvalidArgument, "expires_in_seconds: must be 1-%d (7 days), got %d", int64(MaxTTL/time.Second), seconds)
	}
	return time.Duration(seconds) * time.Second, nil
}

// SetClock replaces the clock, for tests.
func (s *Signer) SetClock(now func() time.Time) { s.now = now }
