// Package tenant carries who a call is for — the account the router
// authenticated, the workspace user, the session — from the router to the
// other services in gRPC metadata.
//
// Only the router knows API keys, so only it may say which account a call is
// for. It signs the metadata it sets with the cluster's internal secret; the
// other services accept the values only when the signature matches, so a
// client that reaches a service directly (or smuggles headers through
// grpc-gateway) cannot choose an account or a user.
package tenant

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Metadata keys. All are lowercase as gRPC requires.
const (
	keyAccount   = "conch-account"
	keyAdmin     = "conch-admin"
	keyUser      = "x-shell-user-id"
	keySession   = "x-conch-session-id"
	keyPublicURL = "conch-public-url"
	keyKey       = "conch-key"
	keySurface   = "conch-surface"
	keySignature = "conch-signature"
)

// signedKeys are the keys covered by the signature, in signing order.
var signedKeys = []string{keyAccount, keyAdmin, keyUser, keySession, keyPublicURL, keyKey, keySurface}

// Surfaces a client may say it is, recorded beside the key that
// authenticated it. Anything else counts as SurfaceREST.
const (
	SurfaceREST = "rest"
	SurfaceCLI  = "cli"
	SurfaceWeb  = "web"
	// SurfaceMCP is the router's MCP endpoint, which sets it itself.
	SurfaceMCP = "mcp"
)

// ClientHeader is the HTTP header with which conch's own clients name
// their surface (SurfaceCLI, SurfaceWeb).
const ClientHeader = "X-Conch-Client"

// SurfaceOf maps a ClientHeader value to a surface: only the known
// surfaces are kept, so the record never holds text a client chose.
func SurfaceOf(header string) string {
	switch header {
	case SurfaceCLI, SurfaceWeb, SurfaceMCP:
		return header
	}
	return SurfaceREST
}

// Scope is who a call is for.
type Scope struct {
	// Account is the authenticated account id.
	Account string
	// Admin is true for the admin key, which may manage accounts.
	Admin bool
	// User is the workspace user (X-Shell-User-Id), if any.
	User string
	// Session is the conversation (X-Conch-Session-Id), if any.
	Session string
	// PublicURL is the router's public base URL, for links it hands out.
	PublicURL string
	// Key is the id of the API key that authenticated the call, so that
	// what is recorded of a caller (who answered an approval) names the
	// key and never a name the caller wrote. Empty for calls the router
	// makes on its own (node tunnels, tool hosts).
	Key string
	// Surface is how the key holder called: SurfaceREST, SurfaceCLI or
	// SurfaceWeb. The client says which, so it only describes the key's
	// call and proves nothing by itself.
	Surface string
}

func (s Scope) values() map[string]string {
	vals := map[string]string{keyAccount: s.Account, keyUser: s.User, keySession: s.Session, keyPublicURL: s.PublicURL, keyKey: s.Key, keySurface: s.Surface}
	if s.Admin {
		vals[keyAdmin] = "true"
	}
	return vals
}

type scopeKey struct{}

// With returns ctx carrying scope.
func With(ctx context.Context, s Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// From returns the scope of ctx, if any.
func From(ctx context.Context) (Scope, bool) {
	s, ok := ctx.Value(scopeKey{}).(Scope)
	return s, ok && s.Account != ""
}

// Account returns the account of ctx or an Unauthenticated error.
func Account(ctx context.Context) (string, error) {
	s, ok := From(ctx)
	if !ok {
		return "", errs.New(errs.Unauthenticated, "no account: the call did not come through the router")
	}
	return s.Account, nil
}

// RequireAdmin returns an error unless ctx is the admin's.
func RequireAdmin(ctx context.Context) error {
	s, ok := From(ctx)
	if !ok {
		return errs.New(errs.Unauthenticated, "no account: the call did not come through the router")
	}
	if !s.Admin {
		return errs.New(errs.PermissionDenied, "this call needs the admin key")
	}
	return nil
}

// Signer signs and verifies scope metadata with the internal secret.
type Signer struct {
	key []byte
}

// NewSigner returns a Signer for secret, which must be at least 16 bytes.
func NewSigner(secret string) (*Signer, error) {
	if len(secret) < 16 {
		return nil, errors.New("tenant: internal secret must be at least 16 bytes")
	}
	return &Signer{key: []byte(secret)}, nil
}

func (s *Signer) sign(vals map[string]string) string {
	mac := hmac.New(sha256.New, s.key)
	for _, k := range signedKeys {
		mac.Write([]byte(k))
		mac.Write([]byte{0})
		mac.Write([]byte(vals[k]))
		mac.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// outgoing replaces any scope metadata in ctx's outgoing metadata with the
// signed scope of ctx (or none).
func (s *Signer) outgoing(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	for _, k := range append(signedKeys, keySignature) {
		delete(md, k)
	}
	if scope, ok := From(ctx); ok {
		vals := scope.values()
		for _, k := range signedKeys {
			if vals[k] != "" {
				md.Set(k, vals[k])
			}
		}
		md.Set(keySignature, s.sign(vals))
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// incoming returns ctx with the verified scope of its incoming metadata.
// Metadata without a signature carries no scope; a bad signature is an error.
func (s *Signer) incoming(ctx context.Context) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	sig := first(md, keySignature)
	if sig == "" {
		return ctx, nil
	}
	vals := make(map[string]string, len(signedKeys))
	for _, k := range signedKeys {
		vals[k] = first(md, k)
	}
	if !hmac.Equal([]byte(sig), []byte(s.sign(vals))) {
		return nil, errs.New(errs.Unauthenticated, "invalid internal signature")
	}
	return With(ctx, Scope{Account: vals[keyAccount], Admin: vals[keyAdmin] == "true", User: vals[keyUser], Session: vals[keySession], PublicURL: vals[keyPublicURL],
		Key: vals[keyKey], Surface: vals[keySurface]}), nil
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) == 1 {
		return strings.Clone(v[0])
	}
	return ""
}

// UnaryClientInterceptor signs the scope of each outgoing call.
func (s *Signer) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(s.outgoing(ctx), method, req, reply, cc, opts...)
	}
}

// StreamClientInterceptor signs the scope of each outgoing stream.
func (s *Signer) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(s.outgoing(ctx), desc, cc, method, opts...)
	}
}

// UnaryServerInterceptor verifies the scope of each incoming call.
func (s *Signer) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := s.incoming(ctx)
		if err != nil {
			return nil, errs.ToStatus(err)
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor verifies the scope of each incoming stream.
func (s *Signer) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := s.incoming(ss.Context())
		if err != nil {
			return errs.ToStatus(err)
		}
		return handler(srv, &scopedStream{ServerStream: ss, ctx: ctx})
	}
}

type scopedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *scopedStream) Context() context.Context { return s.ctx }

// UserIDRule is what ValidUserID accepts, in words, for the messages that
// refuse a user id: "user: must be " + UserIDRule.
const UserIDRule = `1-128 characters of [A-Za-z0-9._@-], not "." or ".."`

// ValidUserID reports whether id is a valid workspace user id (UserIDRule).
func ValidUserID(id string) bool {
	return validID(id, 128, "._@-")
}

// ValidSessionID reports whether id is a valid session id: 1-128 characters
// of [A-Za-z0-9._:@-], and not "." or "..".
func ValidSessionID(id string) bool {
	return validID(id, 128, "._:@-")
}

func validID(id string, max int, punct string) bool {
	if id == "" || len(id) > max || id == "." || id == ".." {
		return false
	}
	for _, r := range id {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune(punct, r)) {
			return false
		}
	}
	return true
}
