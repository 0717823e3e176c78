// Package sessions keeps what a conversation sent with X-Conch-Session-Id
// keeps between its completions: the sandbox it reuses, and the /exec
// overrides of its exec settings.
package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/execpolicy"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/router/gateways"
)

// Store keeps, per (account, gateway, session, user), the sandbox a
// conversation reuses, and the session's /exec overrides, in etcd.
type Store struct {
	cli *clientv3.Client
}

// New returns the store over cli.
func New(cli *clientv3.Client) *Store { return &Store{cli: cli} }

func sessionKey(kind, account, gateway, session, user string) string {
	return "conch/sessions/" + kind + "/" + account + "/" + gateway + "/" + url.PathEscape(session) + "/" + url.PathEscape(user)
}

// Sandbox is the sandbox of a conversation with X-Conch-Session-Id:
// reused by the session's completions until the executor ends it after
// the gateway's session idle time without use; never destroyed by a
// completion.
type Sandbox struct {
	store *Store
	ready func(ctx context.Context, id string) error
	exec  executorv1.ExecutorServiceClient
	req   *executorv1.CreateSandboxRequest
	key   string
	log   *slog.Logger

	mu  sync.Mutex
	id  string
	err error
}

// Sandbox returns the session's sandbox, found or created as req on first
// use; ready, when set, runs once the completion has it.
func (s *Store) Sandbox(exec executorv1.ExecutorServiceClient, req *executorv1.CreateSandboxRequest, g *routerv1.Gateway, account, session string, ready func(ctx context.Context, id string) error, log *slog.Logger) *Sandbox {
	req.Session = session
	req.IdleTimeoutSeconds = int32(gateways.SessionIdle(g) / time.Second)
	return &Sandbox{store: s, ready: ready, exec: exec, req: req, key: sessionKey("sandbox", account, g.GetName(), session, req.GetUser()), log: log}
}

// ID returns the session's live sandbox, creating it when there is none.
func (s *Sandbox) ID(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != "" || s.err != nil {
		return s.id, s.err
	}
	id, err := s.resolve(ctx)
	if err == nil {
		if s.ready != nil {
			// The grant follows the tools of this completion's gateway.
			err = s.ready(ctx, id)
		}
	}
	s.id, s.err = id, err
	return s.id, s.err
}

func (s *Sandbox) resolve(ctx context.Context) (string, error) {
	for attempt := 0; attempt < 3; attempt++ {
		resp, err := s.store.cli.Get(ctx, s.key)
		if err != nil {
			return "", fmt.Errorf("session lookup: %w", err)
		}
		var rev int64
		if len(resp.Kvs) == 1 {
			id := string(resp.Kvs[0].Value)
			rev = resp.Kvs[0].ModRevision
			sb, err := s.exec.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: id})
			if err == nil && sb.GetSandbox().GetState() == executorv1.SandboxState_SANDBOX_STATE_READY {
				return id, nil
			}
		}
		created, err := s.exec.CreateSandbox(ctx, s.req)
		if err != nil {
			return "", err
		}
		id := created.GetId()
		cmp := clientv3.Compare(clientv3.ModRevision(s.key), "=", rev)
		txn, err := s.store.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(s.key, id)).Commit()
		if err == nil && txn.Succeeded {
			return id, nil
		}
		// Another completion of the session won the race: use its sandbox.
		if _, derr := s.exec.DestroySandbox(context.WithoutCancel(ctx), &executorv1.DestroySandboxRequest{Id: id}); derr != nil {
			s.log.WarnContext(ctx, "sandbox destroy failed", "sandbox", id, "error", derr)
		}
		if err != nil {
			return "", fmt.Errorf("session record: %w", err)
		}
	}
	return "", fmt.Errorf("session %q: sandbox keeps changing; try again", s.req.GetSession())
}

// Live returns the session's running sandbox, nil when it has none (a
// completion of the session would create one).
func (s *Store) Live(ctx context.Context, exec executorv1.ExecutorServiceClient, account, gateway, session, user string) (*executorv1.Sandbox, error) {
	resp, err := s.cli.Get(ctx, sessionKey("sandbox", account, gateway, session, user))
	if err != nil {
		return nil, fmt.Errorf("session lookup: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	sb, err := exec.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: string(resp.Kvs[0].Value)})
	if err != nil || sb.GetSandbox().GetState() != executorv1.SandboxState_SANDBOX_STATE_READY {
		// Gone, or not there: a completion of the session makes another,
		// as resolve does.
		return nil, nil
	}
	return sb.GetSandbox(), nil
}

// Current is the session's sandbox once this completion has it, else "".
func (s *Sandbox) Current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// Destroy keeps a session's sandbox: it ends when idle.
func (s *Sandbox) Destroy(context.Context) {}

// End ends the session's sandbox now, for a session whose client ended
// it before its idle time ran out, and returns the sandbox's id ("" when
// the session had none).
func (s *Store) End(ctx context.Context, exec executorv1.ExecutorServiceClient, account, gateway, session, user string) (string, error) {
	key := sessionKey("sandbox", account, gateway, session, user)
	resp, err := s.cli.Delete(ctx, key, clientv3.WithPrevKV())
	if err != nil {
		return "", fmt.Errorf("session %q: forget sandbox: %w", session, err)
	}
	if len(resp.PrevKvs) == 0 {
		return "", nil
	}
	id := string(resp.PrevKvs[0].Value)
	if _, err := exec.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: id}); err != nil && errs.KindOf(err) != errs.NotFound {
		return id, fmt.Errorf("session %q: destroy sandbox %s: %w", session, id, err)
	}
	return id, nil
}

// Override is a session's /exec settings.
type Override = execpolicy.Override

// Override returns the session's /exec overrides.
func (s *Store) Override(ctx context.Context, account, gateway, session string) (Override, error) {
	o, _, _, err := etcdx.GetJSON[Override](ctx, s.cli, sessionKey("exec", account, gateway, session, ""))
	if err != nil {
		return Override{}, fmt.Errorf("session overrides: %w", err)
	}
	return o, nil
}

// SetOverride replaces the session's /exec overrides.
func (s *Store) SetOverride(ctx context.Context, account, gateway, session string, o Override) error {
	return etcdx.PutJSON(ctx, s.cli, sessionKey("exec", account, gateway, session, ""), o)
}

// Effective layers the session override over the gateway's exec settings.
// An override stored before the gateway changed may have become looser
// than it; what would loosen is not applied.
func Effective(g *approvalv1.ExecSettings, o Override) *approvalv1.ExecSettings {
	e, _ := execpolicy.Tighten(g, o)
	return e
}

// ApplyExecCommand parses "/exec key=value ..." into o, refusing anything
// that would loosen what the gateway allows. Each value is judged against
// the gateway's settings on its own, so an earlier override never lets a
// later one through.
func ApplyExecCommand(text string, gw *approvalv1.ExecSettings, o Override) (Override, error) {
	base := Effective(gw, Override{})
	for _, kv := range strings.Fields(strings.TrimPrefix(text, "/exec")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return o, fmt.Errorf("%q: want key=value with key host, security, ask or node", kv)
		}
		var one Override
		switch k {
		case "host":
			one.Host = v
		case "security":
			one.Security = v
		case "ask":
			one.Ask = v
		case "node":
			one.Node = v
		default:
			return o, fmt.Errorf("%q: unknown key; use host, security, ask or node", k)
		}
		// An empty value would read as unset and clear the session's
		// earlier override: it is a mistake, not a request to loosen.
		if v == "" && k != "node" {
			return o, overrideRefused(execpolicy.Refusal{Field: k, Value: v, Err: execpolicy.ErrUnknownWord}, base)
		}
		if _, refused := execpolicy.Tighten(gw, one); len(refused) > 0 {
			return o, overrideRefused(refused[0], base)
		}
		switch k {
		case "host":
			o.Host = v
		case "security":
			o.Security = v
		case "ask":
			o.Ask = v
		case "node":
			if v == "" || len(v) > 128 || strings.ContainsAny(v, "/ \t") {
				return o, fmt.Errorf("node: %q is not a node name", v)
			}
			o.Node = v
		}
	}
	return o, nil
}

// overrideRefused says to the user why an /exec value was refused; base
// is the gateway's settings it was judged against.
func overrideRefused(r execpolicy.Refusal, base *approvalv1.ExecSettings) error {
	unknown := errors.Is(r.Err, execpolicy.ErrUnknownWord)
	switch {
	case r.Field == "host" && unknown:
		return fmt.Errorf("host: want sandbox, gateway or node, got %q", r.Value)
	case r.Field == "host":
		return fmt.Errorf("host=%s: the gateway allows host %s; an override may only tighten it (host=sandbox)", r.Value, wordOfHost(base.Host))
	case r.Field == "security" && unknown:
		return fmt.Errorf("security: want deny, allowlist or full, got %q", r.Value)
	case r.Field == "security":
		return fmt.Errorf("security=%s is looser than the gateway's %s; an override may only tighten it", r.Value, wordOfSecurity(base.Security))
	case r.Field == "ask" && unknown:
		return fmt.Errorf("ask: want off, on-miss or always, got %q", r.Value)
	case r.Field == "ask":
		return fmt.Errorf("ask=%s asks less than the gateway's %s; an override may only tighten it", r.Value, wordOfAsk(base.Ask))
	case r.Field == "node" && errors.Is(r.Err, execpolicy.ErrOtherNode):
		return fmt.Errorf("node=%s: the gateway allows node %s only", r.Value, base.Node)
	case r.Field == "node":
		return fmt.Errorf("node: the gateway does not run commands on nodes")
	}
	return r
}

// Describe says what the effective settings e are, as /exec shows them.
func Describe(e *approvalv1.ExecSettings) string {
	s := fmt.Sprintf("host=%s security=%s ask=%s", wordOfHost(e.Host), wordOfSecurity(e.Security), wordOfAsk(e.Ask))
	if e.Node != "" {
		s += " node=" + e.Node
	}
	return s
}

func wordOfHost(h approvalv1.Host) string { return execpolicy.Word(execpolicy.Hosts, h) }
func wordOfSecurity(s approvalv1.Security) string {
	return execpolicy.Word(execpolicy.Securities, s)
}
func wordOfAsk(a approvalv1.Ask) string { return execpolicy.Word(execpolicy.Asks, a) }
