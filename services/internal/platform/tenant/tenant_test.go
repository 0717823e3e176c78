package tenant

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/metadata"
)

func TestSignVerify(t *testing.T) {
	t.Parallel()
	router, err := NewSigner("0123456789abcdef-router")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewSigner("0123456789abcdef-other!")
	if err != nil {
		t.Fatal(err)
	}
	scope := Scope{Account: "acme", Admin: true, User: "alice", Session: "s1", PublicURL: "https://conch.example", Key: "key-1", Surface: SurfaceCLI}

	tests := []struct {
		name      string
		scope     *Scope            // scope the router puts in ctx
		smuggled  map[string]string // metadata already in the outgoing context
		tamper    map[string]string // changes on the wire
		verifier  *Signer
		want      *Scope // nil: no scope
		wantError bool
	}{
		{name: "round trip", scope: &scope, verifier: router, want: &scope},
		{name: "no scope, no metadata", verifier: router},
		{
			name:     "metadata smuggled without a scope is dropped",
			smuggled: map[string]string{keyAccount: "victim", keyUser: "bob", keySignature: "forged"},
			verifier: router,
		},
		{
			name:     "smuggled metadata is replaced by the scope",
			scope:    &scope,
			smuggled: map[string]string{keyAccount: "victim"},
			verifier: router,
			want:     &scope,
		},
		{name: "changed account", scope: &scope, tamper: map[string]string{keyAccount: "acm"}, verifier: router, wantError: true},
		{name: "added admin", scope: &Scope{Account: "acme"}, tamper: map[string]string{keyAdmin: "true"}, verifier: router, wantError: true},
		{name: "changed user", scope: &scope, tamper: map[string]string{keyUser: "alice2"}, verifier: router, wantError: true},
		{name: "added user", scope: &Scope{Account: "acme"}, tamper: map[string]string{keyUser: "bob"}, verifier: router, wantError: true},
		{name: "changed key", scope: &scope, tamper: map[string]string{keyKey: "key-2"}, verifier: router, wantError: true},
		{name: "added key", scope: &Scope{Account: "acme"}, tamper: map[string]string{keyKey: "admin"}, verifier: router, wantError: true},
		{name: "changed surface", scope: &scope, tamper: map[string]string{keySurface: "web"}, verifier: router, wantError: true},
		{
			name:     "smuggled key is replaced by the scope's",
			scope:    &Scope{Account: "acme"},
			smuggled: map[string]string{keyKey: "admin"},
			verifier: router,
			want:     &Scope{Account: "acme"},
		},
		{name: "forged signature", tamper: map[string]string{keyAccount: "acme", keySignature: "AAAA"}, verifier: router, wantError: true},
		{name: "other secret", scope: &scope, verifier: other, wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			if tt.scope != nil {
				ctx = With(ctx, *tt.scope)
			}
			if tt.smuggled != nil {
				ctx = metadata.NewOutgoingContext(ctx, metadata.New(tt.smuggled))
			}
			out, _ := metadata.FromOutgoingContext(router.outgoing(ctx))
			wire := out.Copy()
			for k, v := range tt.tamper {
				wire.Set(k, v)
			}
			got, err := tt.verifier.incoming(metadata.NewIncomingContext(t.Context(), wire))
			if tt.wantError {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s, ok := From(got)
			if tt.want == nil {
				if ok {
					t.Fatalf("got scope %+v, want none", s)
				}
				return
			}
			if diff := cmp.Diff(*tt.want, s); diff != "" {
				t.Errorf("scope mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSurfaceOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ header, want string }{
		{"cli", SurfaceCLI},
		{"web", SurfaceWeb},
		{"mcp", SurfaceMCP},
		{"", SurfaceREST},
		{"rest", SurfaceREST},
		{"CLI", SurfaceREST},
		{"fallback", SurfaceREST},
		{"cli\nfallback", SurfaceREST},
	} {
		if got := SurfaceOf(tt.header); got != tt.want {
			t.Errorf("SurfaceOf(%q) = %q, want %q", tt.header, got, tt.want)
		}
	}
}

func TestNewSignerRejectsShortSecret(t *testing.T) {
	t.Parallel()
	if _, err := NewSigner("short"); err == nil {
		t.Fatal("want an error for a short secret")
	}
}

func TestValidUserID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want bool
	}{
		{"alice", true},
		{"Alice.Smith@example.com", true},
		{"a-b_c.d", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{".", false},
		{"..", false},
		{"../bob", false},
		{"a/b", false},
		{`a\b`, false},
		{"a b", false},
		{"a%2fb", false},
		{"a\x00b", false},
		{"alice\n", false},
		{"аlice", false}, // Cyrillic а
		{"a:b", false},
	}
	for _, tt := range tests {
		if got := ValidUserID(tt.id); got != tt.want {
			t.Errorf("ValidUserID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}
