package gateways

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/seal"
)

// eachSecret calls f with the path and value of every secret of g (the
// upstream's API key, webhook and MCP header values, egress secrets) and
// puts what f returns in its place. It is the one list of the secret
// fields: Redact blanks them, and etcd holds them sealed.
func eachSecret(g *routerv1.Gateway, f func(field, v string) (string, error)) error {
	if u := g.GetUpstream(); u != nil {
		v, err := f("upstream.api_key", u.GetApiKey())
		if err != nil {
			return err
		}
		u.ApiKey = v
	}
	for i, w := range g.GetTools().GetWebhooks() {
		if err := eachHeader(fmt.Sprintf("tools.webhooks[%d].headers", i), w.Headers, f); err != nil {
			return err
		}
	}
	for i, m := range g.GetTools().GetMcpServers() {
		if err := eachHeader(fmt.Sprintf("tools.mcp_servers[%d].headers", i), m.Headers, f); err != nil {
			return err
		}
	}
	for i, sec := range g.GetShell().GetNetwork().GetSecrets() {
		v, err := f(fmt.Sprintf("shell.network.secrets[%d].value", i), sec.GetValue())
		if err != nil {
			return err
		}
		sec.Value = v
	}
	return nil
}

func eachHeader(field string, h map[string]string, f func(field, v string) (string, error)) error {
	for k, v := range h {
		nv, err := f(field+"["+k+"]", v)
		if err != nil {
			return err
		}
		h[k] = nv
	}
	return nil
}

// encode returns g as stored at etcd key k: its secrets sealed, bound to k
// and their field, so that a sealed value copied into another gateway, or
// another account's, does not open there. g is not changed.
func (s *Store) encode(k string, g *routerv1.Gateway) ([]byte, error) {
	g = proto.Clone(g).(*routerv1.Gateway)
	err := eachSecret(g, func(field, v string) (string, error) {
		if v == "" {
			return "", nil
		}
		return s.keys.SealString(v, seal.Bind(k, field))
	})
	if err != nil {
		return nil, fmt.Errorf("gateways: seal %s: %w", k, err)
	}
	b, err := proto.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("gateways: encode %s: %w", k, err)
	}
	return b, nil
}

// decode reads the gateway stored at etcd key k, its secrets opened.
// Values stored before secrets were sealed are taken as they are; the next
// write seals them.
func (s *Store) decode(k string, b []byte) (*routerv1.Gateway, error) {
	g := &routerv1.Gateway{}
	if err := proto.Unmarshal(b, g); err != nil {
		return nil, fmt.Errorf("gateways: decode %s: %w", k, err)
	}
	err := eachSecret(g, func(field, v string) (string, error) {
		plain, err := s.keys.OpenStored(v, seal.Bind(k, field))
		if err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		return plain, nil
	})
	if err != nil {
		return nil, fmt.Errorf("gateways: open the secrets of %s: %w", k, err)
	}
	return g, nil
}

// Reseal rewrites every gateway whose secrets are not all sealed with the
// active key (sealed with an older key, or stored before sealing began),
// so that older keys can then be removed. A gateway changed meanwhile is
// judged again as it is then (see etcdx.Rewrite); one that cannot be
// re-sealed (its key is missing) is reported, and the others are done.
func (s *Store) Reseal(ctx context.Context) (seal.Pass, error) {
	read, rewritten, err := etcdx.Rewrite(ctx, s.cli, prefix, s.resealed)
	if err != nil {
		err = fmt.Errorf("gateways: reseal: %w", err)
	}
	return seal.Pass{Records: read, Resealed: rewritten}, err
}

// resealed returns the gateway stored at k as b, sealed anew with the
// active key, unless every secret of it already is.
func (s *Store) resealed(k string, b []byte) ([]byte, bool, error) {
	stored := &routerv1.Gateway{}
	if err := proto.Unmarshal(b, stored); err != nil {
		return nil, false, fmt.Errorf("gateways: decode %s: %w", k, err)
	}
	current := true
	_ = eachSecret(stored, func(_, v string) (string, error) {
		current = current && s.keys.Current(v)
		return v, nil
	})
	if current {
		return nil, false, nil
	}
	g, err := s.decode(k, b)
	if err != nil {
		return nil, false, err
	}
	next, err := s.encode(k, g)
	return next, err == nil, err
}
