package signing

import (
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

var (
	k1 = Key{ID: "k1", Secret: []byte(strings.Repeat("a", 32))}
	k2 = Key{ID: "k2", Secret: []byte(strings.Repeat("b", 32))}
)

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	old, _ := New([]Key{k1})
	old.SetClock(func() time.Time { return now })
	rotated, _ := New([]Key{k2, k1})
	rotated.SetClock(func() time.Time { return now })
	only2, _ := New([]Key{k2})
	only2.SetClock(func() time.Time { return now })

	c := Claims{Account: "acme", User: "alice", Path: "/a.txt", ETag: "abc", Expires: now.Add(time.Hour).Unix()}
	tok, err := old.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rotated.Verify(tok); err != nil || got != c {
		t.Fatalf("rotated verify = %+v, %v", got, err)
	}
	id, rest, _ := strings.Cut(tok, ".")
	payload, sig, _ := strings.Cut(rest, ".")
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	expired, _ := old.Sign(Claims{Path: "/a", Expires: now.Unix()})
	bad := map[string]struct {
		s   *Signer
		tok string
	}{
		"retired key":       {only2, tok},
		"changed payload":   {old, id + "." + flip(payload, 3) + "." + sig},
		"changed signature": {old, id + "." + payload + "." + flip(sig, 5)},
		"other key id":      {rotated, "k2." + payload + "." + sig},
		"truncated":         {old, tok[:len(tok)-1]},
		"extra suffix":      {old, tok + "x"},
		"extra dot":         {old, tok + "."},
		"no signature":      {old, id + "." + payload},
		"empty":             {old, ""},
		"expired":           {old, expired},
		"huge":              {old, strings.Repeat("a", 5000)},
		"padded payload":    {old, id + "." + payload + "=." + sig},
	}
	for name, tt := range bad {
		if _, err := tt.s.Verify(tt.tok); errs.KindOf(err) != errs.PermissionDenied {
			t.Errorf("%s: err = %v, want PermissionDenied", name, err)
		}
	}
}

func TestTTLAndKeys(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   int64
		want time.Duration
		ok   bool
	}{{0, time.Hour, true}, {1, time.Second, true}, {604800, MaxTTL, true}, {604801, 0, false}, {-1, 0, false}} {
		got, err := TTL(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("TTL(%d) = %v, %v", tt.in, got, err)
		}
	}
	for _, s := range []string{"", "k1", "k1:short", "bad id:" + strings.Repeat("x", 32), "k:" + strings.Repeat("x", 32) + ",k:" + strings.Repeat("y", 32)} {
		if _, err := ParseKeys(s); err == nil {
			t.Errorf("ParseKeys(%q) succeeded", s)
		}
	}
	keys, err := ParseKeys("new:" + strings.Repeat("x", 32) + ", old:" + strings.Repeat("y", 40))
	if err != nil || len(keys) != 2 || keys[0].ID != "new" {
		t.Fatalf("ParseKeys = %v, %v", keys, err)
	}
}

type testClaims struct {
	Sandbox string `json:"s"`
	Expires int64  `json:"x"`
}

func (c testClaims) ExpiresAt() int64 { return c.Expires }

// A token is good for its purpose only: the same key and claims signed
// for another purpose do not verify, nor do keys derived for another.
func TestPurposes(t *testing.T) {
	t.Parallel()
	secret := []byte(strings.Repeat("i", 32))
	term, _ := NewFor(Terminal, []Key{DerivedKey(Terminal, secret)})
	files, _ := NewFor(PublicFile, []Key{DerivedKey(Terminal, secret)})
	filesOwnKey, _ := NewFor(Terminal, []Key{DerivedKey(PublicFile, secret)})
	c := testClaims{Sandbox: "sb-1", Expires: time.Now().Add(time.Minute).Unix()}
	tok, err := term.Sign(c)
	if err != nil {
		t.Fatal(err)
	}
	var got testClaims
	if err := term.VerifyInto(tok, &got); err != nil || got != c {
		t.Fatalf("verify = %+v, %v", got, err)
	}
	for name, s := range map[string]*Signer{"another purpose": files, "a key derived for another purpose": filesOwnKey} {
		err := s.VerifyInto(tok, &got)
		if errs.KindOf(err) != errs.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", name, err)
		}
	}
	if err := files.VerifyInto(tok, &got); !strings.Contains(err.Error(), "public URL is not valid") {
		t.Errorf("refusal names the wrong thing: %v", err)
	}
	if err := term.VerifyInto("d.e30.x", &got); !strings.Contains(err.Error(), "terminal token is not valid") {
		t.Errorf("refusal names the wrong thing: %v", err)
	}
}
