package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/router/execsettings"
)

// defaultSessionIdle is how long a session's sandbox outlives its last use.
const defaultSessionIdle = 1200

// sessionStore keeps, per (account, gateway, session, user), the sandbox a
// conversation reuses, and the session's /exec overrides.
type sessionStore struct {
	cli *clientv3.Client
}

func sessionKey(kind, account, gateway, session, user string) string {
	return "conch/sessions/" + kind + "/" + account + "/" + gateway + "/" + url.PathEscape(session) + "/" + url.PathEscape(user)
}

// sessionSandbox is the sandbox of a conversation with X-Conch-Session-Id:
// reused by the session's completions until the executor ends it after
// shell.session_idle_seconds without use; never destroyed by a completion.
type sessionSandbox struct {
	store *sessionStore
	hooks sandboxHooks
	exec  executorv1.ExecutorServiceClient
	req   *executorv1.CreateSandboxRequest
	key   string
	log   *slog.Logger

	mu  sync.Mutex
	id  string
	err error
}

func (s *sessionStore) sandbox(exec executorv1.ExecutorServiceClient, req *executorv1.CreateSandboxRequest, g *routerv1.Gateway, account, session string, hooks sandboxHooks, log *slog.Logger) *sessionSandbox {
	req.Session = session
	req.IdleTimeoutSeconds = g.GetShell().GetSessionIdleSeconds()
	if req.IdleTimeoutSeconds == 0 {
		req.IdleTimeoutSeconds = defaultSessionIdle
	}
	return &sessionSandbox{store: s, hooks: hooks, exec: exec, req: req, key: sessionKey("sandbox", account, g.GetName(), session, req.GetUser()), log: log}
}

// ID returns the session's live sandbox, creating it when there is none.
func (s *sessionSandbox) ID(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != "" || s.err != nil {
		return s.id, s.err
	}
	id, err := s.resolve(ctx)
	if err == nil {
		// The grant follows the tools of this completion's gateway.
		err = s.hooks.onReady(ctx, id)
	}
	s.id, s.err = id, err
	return s.id, s.err
}

func (s *sessionSandbox) resolve(ctx context.Context) (string, error) {
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

// destroy keeps a session's sandbox: it ends when idle.
func (s *sessionSandbox) destroy(context.Context, *slog.Logger) {}

// execOverride is a session's /exec settings.
type execOverride = execsettings.Override

func (s *sessionStore) override(ctx context.Context, account, gateway, session string) (execOverride, error) {
	var o execOverride
	resp, err := s.cli.Get(ctx, sessionKey("exec", account, gateway, session, ""))
	if err != nil {
		return o, fmt.Errorf("session overrides: %w", err)
	}
	if len(resp.Kvs) == 1 {
		if err := json.Unmarshal(resp.Kvs[0].Value, &o); err != nil {
			return o, fmt.Errorf("session overrides: %w", err)
		}
	}
	return o, nil
}

func (s *sessionStore) setOverride(ctx context.Context, account, gateway, session string, o execOverride) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	_, err = s.cli.Put(ctx, sessionKey("exec", account, gateway, session, ""), string(b))
	return err
}

// effective layers the session override over the gateway's exec settings.
func effective(g *approvalv1.ExecSettings, o execOverride) *approvalv1.ExecSettings {
	return execsettings.Effective(g, o)
}

// applyExecCommand parses "/exec key=value ..." into o, refusing anything
// that would loosen what the gateway allows.
func applyExecCommand(text string, gw *approvalv1.ExecSettings, o execOverride) (execOverride, error) {
	base := effective(gw, execOverride{})
	for _, kv := range strings.Fields(strings.TrimPrefix(text, "/exec")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return o, fmt.Errorf("%q: want key=value with key host, security, ask or node", kv)
		}
		switch k {
		case "host":
			h, ok := execsettings.Hosts[v]
			if !ok {
				return o, fmt.Errorf("host: want sandbox, gateway or node, got %q", v)
			}
			if h != approvalv1.Host_HOST_SANDBOX && h != base.Host {
				return o, fmt.Errorf("host=%s: the gateway allows host %s; an override may only tighten it (host=sandbox)", v, wordOfHost(base.Host))
			}
			o.Host = v
		case "security":
			s, ok := execsettings.Securities[v]
			if !ok {
				return o, fmt.Errorf("security: want deny, allowlist or full, got %q", v)
			}
			if execsettings.StricterSecurity(base.Security, s) {
				return o, fmt.Errorf("security=%s is looser than the gateway's %s; an override may only tighten it", v, wordOfSecurity(base.Security))
			}
			o.Security = v
		case "ask":
			a, ok := execsettings.Asks[v]
			if !ok {
				return o, fmt.Errorf("ask: want off, on-miss or always, got %q", v)
			}
			if execsettings.StricterAsk(base.Ask, a) {
				return o, fmt.Errorf("ask=%s asks less than the gateway's %s; an override may only tighten it", v, wordOfAsk(base.Ask))
			}
			o.Ask = v
		case "node":
			if base.Host != approvalv1.Host_HOST_NODE {
				return o, fmt.Errorf("node: the gateway does not run commands on nodes")
			}
			if v == "" || len(v) > 128 || strings.ContainsAny(v, "/ \t") {
				return o, fmt.Errorf("node: %q is not a node name", v)
			}
			o.Node = v
		default:
			return o, fmt.Errorf("%q: unknown key; use host, security, ask or node", k)
		}
	}
	return o, nil
}

func describe(e *approvalv1.ExecSettings) string {
	s := fmt.Sprintf("host=%s security=%s ask=%s", wordOfHost(e.Host), wordOfSecurity(e.Security), wordOfAsk(e.Ask))
	if e.Node != "" {
		s += " node=" + e.Node
	}
	return s
}

func wordOfHost(h approvalv1.Host) string { return execsettings.Word(execsettings.Hosts, h) }
func wordOfSecurity(s approvalv1.Security) string {
	return execsettings.Word(execsettings.Securities, s)
}
func wordOfAsk(a approvalv1.Ask) string { return execsettings.Word(execsettings.Asks, a) }
