package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Errors of Open. Each says why a value does not open and never shows the
// value.
var (
	// ErrNotSealed is a value that is not in the sealed format.
	ErrNotSealed = errors.New("seal: not a sealed value")
	// ErrUnknownKey is a value sealed with a key the keyring does not
	// hold (removed before every value was re-sealed).
	ErrUnknownKey = errors.New("seal: sealed with a key the keyring does not hold")
	// ErrNoOpen is a value that does not open with the key of its id: it
	// was altered, sealed for another place, or the key of that id is
	// not the one that sealed it.
	ErrNoOpen = errors.New("seal: does not open: altered, sealed for another place, or sealed by another key of that id")
)

const (
	// prefix starts every sealed value; v1 is the envelope below.
	prefix   = "sealed:v1:"
	keySize  = 32 // AES-256
	nonceLen = 12 // GCM's standard nonce
	tagLen   = 16
	// wrappedLen is the data key as the KEK seals it.
	wrappedLen = keySize + tagLen
	// minBody is an envelope of an empty value.
	minBody = nonceLen + wrappedLen + nonceLen + tagLen
)

// Seal returns plain sealed with the active key, bound to ad (where the
// value is stored; see Bind). The result is text: it fits in a string.
//
// Each call draws a new data key and nonces from crypto/rand, so one KEK
// may seal some 2^32 values before its random nonces risk repeating.
func (r *Keyring) Seal(plain, ad []byte) ([]byte, error) {
	dek := make([]byte, keySize)
	_, _ = rand.Read(dek) // crypto/rand.Read never returns an error
	body := make([]byte, 0, minBody+len(plain))
	body, err := sealWith(r.active.secret, body, dek, wrapAD(r.active.ID))
	if err != nil {
		return nil, err
	}
	if body, err = sealWith(dek, body, plain, dataAD(r.active.ID, ad)); err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(prefix)+len(r.active.ID)+1+base64.RawURLEncoding.EncodedLen(len(body)))
	out = append(out, prefix...)
	out = append(out, r.active.ID...)
	out = append(out, ':')
	return base64.RawURLEncoding.AppendEncode(out, body), nil
}

// Open returns the plain value of sealed, which must have been sealed for
// ad by a key of the keyring.
func (r *Keyring) Open(sealed, ad []byte) ([]byte, error) {
	id, enc, err := split(sealed)
	if err != nil {
		return nil, err
	}
	body, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(body) < minBody {
		return nil, fmt.Errorf("%w: the envelope of key %q is malformed", ErrNotSealed, id)
	}
	k, ok := r.keys[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownKey, id)
	}
	dek, err := openWith(k.secret, body[:nonceLen+wrappedLen], wrapAD(id))
	if err != nil {
		return nil, fmt.Errorf("%w (key %q)", ErrNoOpen, id)
	}
	plain, err := openWith(dek, body[nonceLen+wrappedLen:], dataAD(id, ad))
	if err != nil {
		return nil, fmt.Errorf("%w (key %q)", ErrNoOpen, id)
	}
	return plain, nil
}

// KeyID returns the id of the key that sealed v; ok is false when v is not
// a sealed value.
func KeyID(v []byte) (id string, ok bool) {
	id, _, err := split(v)
	return id, err == nil
}

// split reads the key id and the base64 envelope of a sealed value.
func split(v []byte) (id, body string, err error) {
	rest, ok := strings.CutPrefix(string(v), prefix)
	if !ok {
		return "", "", ErrNotSealed
	}
	id, body, ok = strings.Cut(rest, ":")
	if !ok || !validID(id) {
		return "", "", ErrNotSealed
	}
	return id, body, nil
}

// SealString is Seal for a string field.
func (r *Keyring) SealString(plain string, ad []byte) (string, error) {
	b, err := r.Seal([]byte(plain), ad)
	return string(b), err
}

// OpenStored returns the plain value of a string field as it was stored:
// a sealed value is opened, and any other is returned as it is, for
// values stored before sealing began (they are sealed when next written).
// A stored value that reads as sealed but does not open is an error, never
// taken as plain.
func (r *Keyring) OpenStored(v string, ad []byte) (string, error) {
	if !strings.HasPrefix(v, prefix) {
		return v, nil
	}
	b, err := r.Open([]byte(v), ad)
	return string(b), err
}

// Current reports whether a stored string field needs no re-sealing: it is
// empty, or sealed with the active key.
func (r *Keyring) Current(v string) bool {
	if v == "" {
		return true
	}
	id, ok := KeyID([]byte(v))
	return ok && id == r.active.ID
}

// Bind returns associated data naming where a value is stored, from its
// parts (an etcd key, a field path): each is length-prefixed, so that no
// two lists of parts give the same bytes.
func Bind(parts ...string) []byte {
	var out []byte
	for _, p := range parts {
		out = binary.AppendUvarint(out, uint64(len(p)))
		out = append(out, p...)
	}
	return out
}

// wrapAD binds a wrapped data key to the id of the KEK that wrapped it, so
// that an envelope relabelled with another id does not open.
func wrapAD(id string) []byte { return Bind("conch seal v1 data key", id) }

// dataAD binds a sealed value to its key id and to where it is stored.
func dataAD(id string, ad []byte) []byte {
	return append(Bind("conch seal v1 value", id), ad...)
}

// sealWith appends nonce | AES-256-GCM(key, plain, ad) to dst.
func sealWith(key, dst, plain, ad []byte) ([]byte, error) {
	aead, err := gcm(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, nonceLen)
	_, _ = rand.Read(nonce)
	dst = append(dst, nonce...)
	return aead.Seal(dst, nonce, plain, ad), nil
}

// openWith opens nonce | ciphertext as sealWith wrote it.
func openWith(key, in, ad []byte) ([]byte, error) {
	aead, err := gcm(key)
	if err != nil {
		return nil, err
	}
	return aead.Open(nil, in[:nonceLen], in[nonceLen:], ad)
}

func gcm(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return cipher.NewGCM(block)
}

// Pass counts what one re-sealing pass over a kind of record did.
type Pass struct {
	// Records were read; Resealed of them were rewritten with the
	// active key.
	Records, Resealed int
}
