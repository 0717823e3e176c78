package etcdx

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"

	"go.etcd.io/etcd/client/pkg/v3/types"
)

// DefaultClusterToken is the initial cluster token when MemberOptions
// leaves it empty. Members of one cluster must agree on it.
const DefaultClusterToken = "conch"

// MemberOptions configures StartMember: one member of a static cluster
// whose members are all named in InitialCluster.
type MemberOptions struct {
	// Name is this member's name in InitialCluster. Required.
	Name string
	// Dir holds the member's data; it is created if missing. A member
	// restarted on an existing Dir rejoins with its data and ignores
	// InitialCluster. Required.
	Dir string
	// ClientURL is where clients connect (http://host:port), advertised
	// as it is and listened on at its address; a host name, which etcd
	// cannot bind (a container's or pod's name), is listened on at every
	// address. Required.
	ClientURL string
	// PeerURL is where the other members connect, advertised and listened
	// on as ClientURL is; it must be this member's URL in InitialCluster.
	// Required.
	PeerURL string
	// InitialCluster names every member: "name=http://host:port,...".
	// Required.
	InitialCluster string
	// ClusterToken tells this cluster apart from others on the same
	// hosts; empty means DefaultClusterToken.
	ClusterToken string
	// UnsafeNoFsync skips fsync, as in EmbeddedOptions.
	UnsafeNoFsync bool
	// TLS, when set, serves clients and peers over TLS to holders of a
	// certificate its CA signed, as in EmbeddedOptions; the URLs are
	// then https.
	TLS *ServerTLS
	// Logger receives etcd's error logs; nil discards them.
	Logger *slog.Logger
}

// OptionError reports a bad field of MemberOptions.
type OptionError struct {
	// Option is the field's name: "Name", "Dir", "ClientURL", "PeerURL"
	// or "InitialCluster".
	Option string
	// Err says what is wrong.
	Err error
}

// Error returns "<option>: <err>".
func (e *OptionError) Error() string { return e.Option + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *OptionError) Unwrap() error { return e.Err }

func optionErr(option, format string, args ...any) error {
	return &OptionError{Option: option, Err: fmt.Errorf(format, args...)}
}

// Validate checks the options; the error is an *OptionError naming the
// first bad field.
func (o MemberOptions) Validate() error {
	if o.Name == "" {
		return optionErr("Name", "required")
	}
	if o.Dir == "" {
		return optionErr("Dir", "required")
	}
	scheme := "http"
	if o.TLS != nil {
		scheme = "https"
	}
	if _, err := memberURL(o.ClientURL, scheme); err != nil {
		return optionErr("ClientURL", "%w", err)
	}
	peer, err := memberURL(o.PeerURL, scheme)
	if err != nil {
		return optionErr("PeerURL", "%w", err)
	}
	members, err := types.NewURLsMap(o.InitialCluster)
	if err != nil {
		return optionErr("InitialCluster", "%w", err)
	}
	mine, ok := members[o.Name]
	if !ok {
		return optionErr("InitialCluster", "no member named %q", o.Name)
	}
	if len(mine) != 1 || mine[0].String() != peer.String() {
		return optionErr("InitialCluster", "member %q is at %v, not at the peer URL %s", o.Name, mine, peer)
	}
	return nil
}

// memberURL parses a scheme://host:port URL with nothing else in it:
// https with TLS, http without.
func memberURL(s, scheme string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != scheme || u.Port() == "" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("%q: want %s://host:port", s, scheme)
	}
	u.Path = ""
	return u, nil
}

// bindURL is the URL etcd listens on for the advertised URL u: u itself
// when its host is an address or localhost, else every address at u's
// port (etcd binds addresses only).
func bindURL(u url.URL) url.URL {
	if h := u.Hostname(); h == "localhost" || net.ParseIP(h) != nil {
		return u
	}
	u.Host = net.JoinHostPort("0.0.0.0", u.Port())
	return u
}

// StartMember starts one member of a static multi-member cluster and
// returns without waiting for the cluster: a member serves only once a
// quorum of its peers is up, which Ready reports. It returns when ctx
// ends even if etcd has not started. Another etcd holding opts.Dir is a
// *dirlock.HeldError.
func StartMember(ctx context.Context, opts MemberOptions) (*Embedded, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("etcdx: start member: %w", err)
	}
	scheme := "http"
	if opts.TLS != nil {
		scheme = "https"
	}
	clientURL, _ := memberURL(opts.ClientURL, scheme)
	peerURL, _ := memberURL(opts.PeerURL, scheme)
	cfg := newConfig(opts.Name, opts.Dir, *clientURL, *peerURL, opts.UnsafeNoFsync)
	cfg.ListenClientUrls = []url.URL{bindURL(*clientURL)}
	cfg.ListenPeerUrls = []url.URL{bindURL(*peerURL)}
	cfg.InitialCluster = opts.InitialCluster
	if opts.TLS != nil {
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = opts.TLS.info(), opts.TLS.info()
	}
	cfg.InitialClusterToken = opts.ClusterToken
	if cfg.InitialClusterToken == "" {
		cfg.InitialClusterToken = DefaultClusterToken
	}
	e, err := start(ctx, cfg, opts.Logger, clientURL.String())
	if err != nil {
		return nil, fmt.Errorf("etcdx: start member %s: %w", opts.Name, err)
	}
	return e, nil
}

// Ready is closed once the member serves clients, which for a member of a
// multi-member cluster needs a quorum.
func (e *Embedded) Ready() <-chan struct{} { return e.etcd.Server.ReadyNotify() }
