// Package signing makes and checks short-lived tokens: an HMAC-SHA256
// over JSON claims that expire, with a key id so keys can be rotated (the
// first key signs, every configured key verifies), for one purpose each
// (a token signed for one never verifies for another): temporary public
// file URLs, and terminals opened from a browser.
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

// Purpose is what a signer's tokens are for: its name goes into every
// MAC, and its noun into every refusal.
type Purpose struct{ name, noun string }

// The purposes.
var (
	PublicFile = Purpose{"conch-public-file-v1", "public URL"}
	Terminal   = Purpose{"conch-terminal-v1", "terminal token"}
	Port       = Purpose{"conch-port-v1", "port URL"}
)

// Expiring claims say when they end, in Unix seconds.
type Expiring interface{ ExpiresAt() int64 }

// Claims is what a public file token grants: reading one exact file until
// Expires.
type Claims struct {
	Account string `json:"a"`
	User    string `json:"u"`
	Path    string `json:"p"`
	// ETag pins the content: a replaced file is not served.
	ETag    string `json:"e"`
	Expires int64  `json:"x"`
}

// ExpiresAt is when the claims end.
func (c Claims) ExpiresAt() int64 { return c.Expires }

// Key is one signing key.
type Key struct {
	ID     string
	Secret []byte
}

// Signer signs with its first key and verifies with all.
type Signer struct {
	keys    []Key
	purpose Purpose
	now     func() time.Time
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

// New returns a signer of public file tokens; keys[0] signs.
func New(keys []Key) (*Signer, error) { return NewFor(PublicFile, keys) }

// NewFor returns a signer of tokens for p; keys[0] signs.
func NewFor(p Purpose, keys []Key) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("signing: no keys")
	}
	return &Signer{keys: keys, purpose: p, now: time.Now}, nil
}

// DerivedKey is a key for purpose p made from a secret every process of
// the cluster holds (the internal secret), for tokens whose signer and
// verifier are processes of one kind (routers): nothing to configure, and
// a token signed with it is no other purpose's.
func DerivedKey(p Purpose, secret []byte) Key {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("conch-derived-key\x00" + p.name))
	return Key{ID: "d", Secret: m.Sum(nil)}
}

// Sign returns a token for c.
func (s *Signer) Sign(c Expiring) (string, error) {
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("signing: %w", err)
	}
	k := s.keys[0]
	p := base64.RawURLEncoding.EncodeToString(payload)
	return k.ID + "." + p + "." + s.mac(k, p), nil
}

func (s *Signer) mac(k Key, payload string) string {
	m := hmac.New(sha256.New, k.Secret)
	m.Write([]byte(s.purpose.name + "\x00" + k.ID + "\x00" + payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks a public file token and returns its claims. Any change
// to the token, an unknown key or an expired token is PermissionDenied.
func (s *Signer) Verify(token string) (Claims, error) {
	var c Claims
	if err := s.VerifyInto(token, &c); err != nil {
		return Claims{}, err
	}
	return c, nil
}

// VerifyInto checks a token and decodes its claims into c. Any change to
// the token, an unknown key, another purpose's token or an expired one is
// PermissionDenied.
func (s *Signer) VerifyInto(token string, c Expiring) error {
	denied := func(why string) error {
		return errs.New(errs.PermissionDenied, "%s %s", s.purpose.noun, why)
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
	if key == nil || !hmac.Equal([]byte(sig), []byte(s.mac(*key, payload))) {
		return denied("is not valid")
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(payload)
	if err != nil {
		return denied("is not valid")
	}
	if err := json.Unmarshal(b, c); err != nil {
		return denied("is not valid")
	}
	if s.now().Unix() >= c.ExpiresAt() {
		return denied("has expired")
	}
	return nil
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
