package approval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/approval/document"
	"github.com/conch-sh/conch/services/approval/notify"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/execpolicy"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// DefaultSkillDirs is where the sandbox puts the commands of moved tools.
var DefaultSkillDirs = []string{"/run/conch/tools"}

// Defaults of the exec settings (docs/explanation/exec-policy.md).
const (
	DefaultApprovalTimeout = execpolicy.DefaultApprovalTimeoutSeconds * time.Second
	// MaxAskBytes is the longest command a human is asked about: longer
	// ones cannot be reviewed (nor stored whole in one etcd request) and
	// are refused instead.
	MaxAskBytes = 256 << 10
)

// Options configures the approval service as it is built; Config holds
// the settings it is started with.
type Options struct {
	// Path is the PATH commands are resolved along when the caller sends
	// no resolved segments (Evaluate, or Authorize from a caller that
	// did not resolve); empty means policy.DefaultPath.
	Path string
	// Home is the home directory of those commands (for ~ in patterns and
	// a bare cd); empty means /home/workspace, the sandbox's.
	Home string
	// SafeBinDirs are the dirs safe bins are trusted from; nil means the
	// policy default.
	SafeBinDirs []string
	// SkillDirs hold the commands of moved tools (docs/reference/tools.md),
	// which autoAllowSkills lets run without an allowlist entry; nil means
	// DefaultSkillDirs.
	SkillDirs []string
	// Logger receives the service's logs.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Name identifies this replica in the notifier election; empty means
	// a random id.
	Name string
	// Outbound guards the connections forwarding makes for tenants (and
	// judges the URLs they save); nil means a guard with no operator
	// exceptions.
	Outbound *outbound.Guard
	// Sender delivers chat notices; nil means one through Outbound.
	Sender *notify.Sender
	// Audit receives the audit trail; nil records nothing.
	Audit *audit.Writer
	// Reviewer asks a gateway's model about an allowlist miss when the
	// gateway names one (exec.reviewer); nil sends every miss to humans.
	Reviewer Reviewer
}

// Reviewer is the router's ReviewService.
type Reviewer interface {
	Review(ctx context.Context, in *routerv1.ReviewRequest, opts ...grpc.CallOption) (*routerv1.ReviewResponse, error)
}

// Server serves ApprovalService.
type Server struct {
	approvalv1.UnsafeApprovalServiceServer

	store *store.Store
	cfg   Options
	log   *slog.Logger
}

var _ approvalv1.ApprovalServiceServer = (*Server)(nil)

// New returns the approval service over st.
func New(st *store.Store, cfg Options) (*Server, error) {
	if st == nil {
		return nil, errors.New("approval: no store")
	}
	if !st.Seals() {
		return nil, errors.New("approval: the store has no keys to seal the forwarding configs' secrets with")
	}
	if cfg.Path == "" {
		cfg.Path = policy.DefaultPath
	}
	if cfg.Home == "" {
		cfg.Home = contract.WorkspaceDir
	}
	if !path.IsAbs(cfg.Home) {
		return nil, fmt.Errorf("approval: home %q must be absolute", cfg.Home)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SkillDirs == nil {
		cfg.SkillDirs = DefaultSkillDirs
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Outbound == nil {
		cfg.Outbound = outbound.Must(outbound.Options{})
	}
	if cfg.Sender == nil {
		cfg.Sender = &notify.Sender{Client: cfg.Outbound.Client(notify.Timeout)}
	}
	return &Server{store: st, cfg: cfg, log: cfg.Logger}, nil
}

// Register registers the service's gRPC handlers on g.
func (s *Server) Register(g *grpc.Server) {
	approvalv1.RegisterApprovalServiceServer(g, s)
}

// judgement is a verdict with what it was reached under.
type judgement struct {
	res      policy.Result
	exec     *approvalv1.ExecSettings
	settings policy.Settings
	timeout  time.Duration
	doc      *document.Document
	// digests are the content digests the caller sent, by resolved path.
	digests map[string]string
}

// judgeInput is what a verdict depends on.
type judgeInput struct {
	command, agent, cwd string
	host                approvalv1.Host
	env                 map[string]string
	exec                *approvalv1.ExecSettings
	segments            []*approvalv1.Segment
	// resolved says the caller resolved the programs: segments are all
	// it found.
	resolved bool
}

func (s *Server) judge(ctx context.Context, account string, in judgeInput) (*judgement, error) {
	doc, _, err := s.store.CachedDocument(ctx, account)
	if err != nil {
		return nil, err
	}
	return s.judgeDoc(doc, in), nil
}

// judgeDoc judges under doc, as judge does under the account's document;
// policy replay judges under a proposed one.
func (s *Server) judgeDoc(doc *document.Document, in judgeInput) *judgement {
	docSettings, skills := doc.PolicySettings(in.agent)
	eff := settingsFrom(execpolicy.Effective(in.host, settingsTo(docSettings), in.exec))
	cfg := policy.Config{
		Allowlist: doc.Allowlist(in.agent), Home: s.cfg.Home, SafeBinDirs: s.cfg.SafeBinDirs,
		AutoAllowSkills: skills, SkillDirs: s.cfg.SkillDirs,
	}
	if in.exec != nil && len(in.exec.GetSafeBins()) > 0 {
		cfg.SafeBins = in.exec.GetSafeBins()
	}
	cfg.Deny = doc.Denylist(in.agent)
	for _, r := range in.exec.GetDeny() {
		cfg.Deny = append(cfg.Deny, policy.Entry{ID: r.GetId(), Pattern: r.GetPattern(), ArgPattern: r.GetArgPattern()})
	}
	var resolver policy.Resolver
	digests := map[string]string{}
	if len(in.segments) > 0 || in.resolved {
		m := policy.MapResolver{Paths: map[string]string{}, Real: map[string]string{}}
		for _, seg := range in.segments {
			if len(seg.GetArgv()) == 0 || seg.GetResolvedPath() == "" || !path.IsAbs(seg.GetResolvedPath()) {
				continue
			}
			resolved := path.Clean(seg.GetResolvedPath())
			if d := seg.GetContentDigest(); d != "" {
				digests[resolved] = d
			}
			if name := seg.GetArgv()[0]; !strings.Contains(name, "/") {
				m.Paths[name] = resolved
			}
			m.Paths[resolved] = resolved
			if r := seg.GetRealPath(); r != "" && path.IsAbs(r) {
				m.Real[resolved] = path.Clean(r)
			}
		}
		resolver = m
	} else {
		p := policy.SplitPath(s.cfg.Path)
		if in.exec != nil {
			p = append(slices.Clone(in.exec.GetPathPrepend()), p...)
		}
		resolver = policy.PathResolver{Path: p}
	}
	cwd := in.cwd
	if cwd == "" {
		cwd = s.cfg.Home
	}
	res := policy.New(cfg).Evaluate(policy.Request{Command: in.command, Cwd: cwd, Env: in.env, Settings: eff, Resolver: resolver})
	timeout := DefaultApprovalTimeout
	if in.exec != nil && in.exec.GetApprovalTimeoutSeconds() > 0 {
		timeout = time.Duration(in.exec.GetApprovalTimeoutSeconds()) * time.Second
	}
	return &judgement{res: res, exec: in.exec, settings: eff, timeout: timeout, doc: doc, digests: digests}
}

// Evaluate implements ApprovalService.
func (s *Server) Evaluate(ctx context.Context, req *approvalv1.EvaluateRequest) (*approvalv1.EvaluateResponse, error) {
	ctx, span := tracer.Start(ctx, "approval.Evaluate")
	defer span.End()
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetCommand() == "" {
		return nil, errs.New(errs.InvalidArgument, "command: required")
	}
	if req.GetCwd() != "" && !path.IsAbs(req.GetCwd()) {
		return nil, errs.New(errs.InvalidArgument, "cwd: must be an absolute path")
	}
	in := judgeInput{command: req.GetCommand(), agent: req.GetAgent(), cwd: req.GetCwd(), host: req.GetHost(), exec: req.GetSettings()}
	if r := req.GetSandboxResolution(); r != nil && hostFrom(in.host) == policy.HostSandbox {
		// Found as a new sandbox finds them; what was not found there is
		// not to be looked for here.
		in.segments, in.resolved = r.GetSegments(), true
	}
	j, err := s.judge(ctx, account, in)
	if err != nil {
		return nil, err
	}
	verdicts.Add(ctx, 1, verdictAttrs("evaluate", j.res.Decision.String()))
	return &approvalv1.EvaluateResponse{
		Decision: decisionTo(j.res.Decision), Reason: j.res.Reason, Segments: segmentsTo(j.res.Segments), Plan: j.res.Plan,
		Security: securityTo(j.settings.Security), Ask: askTo(j.settings.Ask), AskFallback: securityTo(j.settings.AskFallback),
	}, nil
}

// bindingDigest is what an approval is bound to: a decision cannot be
// reused for a request that differs in any of these, including the content
// of the resolved files when the caller sent their digests.
func bindingDigest(account string, b *approvalv1.Binding, resolved []string, digests map[string]string) string {
	env := make([]string, 0, len(b.GetEnv()))
	for k, v := range b.GetEnv() {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	files := make([]string, len(resolved))
	for i, p := range resolved {
		files[i] = p + "=" + digests[p]
	}
	buf, _ := json.Marshal([]any{account, b.GetSession(), b.GetUser(), b.GetAgent(), b.GetHost().String(), b.GetNode(), b.GetCommand(), b.GetCwd(), env, files})
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}

// Authorize implements ApprovalService.
func (s *Server) Authorize(ctx context.Context, req *approvalv1.AuthorizeRequest) (resp *approvalv1.AuthorizeResponse, err error) {
	ctx, span := tracer.Start(ctx, "approval.Authorize")
	defer span.End()
	defer func() {
		if resp != nil {
			verdicts.Add(ctx, 1, verdictAttrs("authorize", strings.ToLower(strings.TrimPrefix(resp.GetDecision().String(), "POLICY_DECISION_"))))
		}
	}()
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if aerr := s.auditAuthorize(ctx, account, req, resp, err); aerr != nil && err == nil {
			resp, err = nil, aerr
		}
	}()
	b := req.GetBinding()
	if b.GetCommand() == "" {
		return nil, errs.New(errs.InvalidArgument, "binding.command: required")
	}
	if b.GetCwd() != "" && !path.IsAbs(b.GetCwd()) {
		return nil, errs.New(errs.InvalidArgument, "binding.cwd: must be an absolute path")
	}
	j, err := s.judge(ctx, account, judgeInput{
		command: b.GetCommand(), agent: b.GetAgent(), cwd: b.GetCwd(), host: b.GetHost(), env: b.GetEnv(),
		exec: req.GetSettings(), segments: req.GetSegments(), resolved: req.GetResolved(),
	})
	if err != nil {
		return nil, err
	}
	out := &approvalv1.AuthorizeResponse{Segments: segmentsTo(j.res.Segments), Plan: j.res.Plan, Security: securityTo(j.settings.Security)}
	digest := bindingDigest(account, b, j.res.ResolvedPaths(), j.digests)
	if req.GetApprovalId() != "" && j.res.Decision != policy.Deny {
		return s.useApproval(ctx, account, req.GetApprovalId(), digest, out)
	}
	switch j.res.Decision {
	case policy.Allow:
		s.recordUse(ctx, account, b.GetAgent(), b.GetCommand(), j.res.Segments)
		out.Decision, out.Reason = approvalv1.PolicyDecision_POLICY_DECISION_ALLOW, j.res.Reason
		return out, nil
	case policy.AskHuman:
		by, err := s.sessionGrant(ctx, account, b, j.exec, segmentsStored(j.res.Segments))
		if err != nil {
			return nil, err
		}
		if by != "" {
			out.Decision, out.Reason = approvalv1.PolicyDecision_POLICY_DECISION_ALLOW, "allowed for this session by approval "+by
			return out, nil
		}
		if len(b.GetCommand()) > MaxAskBytes {
			out.Decision = approvalv1.PolicyDecision_POLICY_DECISION_DENY
			out.Reason = fmt.Sprintf("%s: command longer than %d bytes cannot be put to a human", policy.ErrNotAllowed, MaxAskBytes)
			return out, nil
		}
		if req.GetAskWithoutApproval() {
			// The caller previews the command, then asks again.
			out.Decision, out.Reason = approvalv1.PolicyDecision_POLICY_DECISION_ASK, j.res.Reason
			return out, nil
		}
		if err := checkPreview(req.GetPreview()); err != nil {
			return nil, err
		}
		a, err := s.createApproval(ctx, account, b, j, digest, req.GetPreview())
		if err != nil {
			return nil, err
		}
		out.Decision, out.Reason, out.Approval = approvalv1.PolicyDecision_POLICY_DECISION_ASK, j.res.Reason, approvalTo(a)
		return out, nil
	}
	out.Decision, out.Reason = approvalv1.PolicyDecision_POLICY_DECISION_DENY, j.res.Reason
	return out, nil
}

// checkPreview refuses a preview beyond contract's bounds: it is stored
// with the approval, in etcd.
func checkPreview(p *approvalv1.Preview) error {
	if p == nil {
		return nil
	}
	if len(p.GetStdout()) > contract.PreviewOutputBytes || len(p.GetStderr()) > contract.PreviewOutputBytes || len(p.GetError()) > contract.PreviewOutputBytes {
		return errs.New(errs.InvalidArgument, "preview: stdout, stderr and error hold at most %d bytes each", contract.PreviewOutputBytes)
	}
	if len(p.GetChanges()) > contract.PreviewChanges {
		return errs.New(errs.InvalidArgument, "preview.changes: at most %d", contract.PreviewChanges)
	}
	for i, c := range p.GetChanges() {
		if len(c.GetPath()) > contract.PreviewPathBytes {
			return errs.New(errs.InvalidArgument, "preview.changes[%d].path: at most %d bytes", i, contract.PreviewPathBytes)
		}
	}
	return nil
}

func (s *Server) createApproval(ctx context.Context, account string, b *approvalv1.Binding, j *judgement, digest string, preview *approvalv1.Preview) (*store.Approval, error) {
	now := s.cfg.Now()
	fallback := policy.Fallback(j.res, j.settings.AskFallback)
	a := &store.Approval{
		ID: document.NewID(), Account: account, Command: b.GetCommand(), Cwd: b.GetCwd(), Agent: b.GetAgent(),
		ResolvedPaths: j.res.ResolvedPaths(), Host: hostFrom(b.GetHost()).String(), Node: b.GetNode(),
		Security: j.settings.Security.String(), Session: b.GetSession(), User: b.GetUser(),
		CreatedAt: now, ExpiresAt: now.Add(j.timeout), Segments: segmentsStored(j.res.Segments),
		Binding: digest, Recordable: j.res.Recordable(), FallbackAllows: fallback.Decision == policy.Allow,
		SessionTTLSeconds: int(sessionTTL(j.exec) / time.Second), SessionByShape: j.exec.GetApprovalSessionByShape(),
		Preview: preview,
	}
	rv := j.exec.GetReviewer()
	reviewed := s.cfg.Reviewer != nil && rv.GetGateway() != "" && len(rv.GetMay()) > 0
	if reviewed {
		a.Reviewing, a.ReviewUntil = true, now.Add(min(reviewTimeout, j.timeout/2))
	}
	if err := s.store.Create(ctx, a, j.timeout); err != nil {
		return nil, err
	}
	s.auditApproval(ctx, eventCreated, a)
	s.log.InfoContext(ctx, "approval requested", "account", account, "approval", a.ID, "agent", a.Agent, "host", a.Host, "reviewer", rv.GetGateway())
	if reviewed {
		go s.review(context.WithoutCancel(ctx), a, j, rv)
	}
	return a, nil
}

// reviewTimeout bounds a reviewer model's turn before humans are asked.
const reviewTimeout = 30 * time.Second

// review puts a to the reviewer model. An answer it may give decides;
// anything else (escalate, another answer, an error, no answer in time)
// hands the approval to humans with the reviewer's note.
func (s *Server) review(ctx context.Context, a *store.Approval, j *judgement, rv *approvalv1.Reviewer) {
	ctx, cancel := context.WithDeadline(ctx, a.ReviewUntil)
	defer cancel()
	var reasons []string
	for _, seg := range j.res.Segments {
		if seg.Decision != policy.Allow {
			reasons = append(reasons, seg.Reason)
		}
	}
	resp, err := s.cfg.Reviewer.Review(ctx, &routerv1.ReviewRequest{
		Gateway: rv.GetGateway(), Agent: a.Agent, Command: a.Command, Plan: j.res.Plan, Cwd: a.Cwd, Host: a.Host,
		ResolvedPaths: a.ResolvedPaths, Reasons: reasons, May: rv.GetMay(),
	})
	note := ""
	switch {
	case err != nil:
		note = "reviewer " + rv.GetGateway() + " did not answer: " + status.Convert(err).Message()
	case slices.Contains(rv.GetMay(), resp.GetDecision()):
		approver := "reviewer:" + rv.GetGateway()
		note = approver + " answered " + resp.GetDecision() + ": " + resp.GetReasoning()
		wctx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		r, err := s.store.Resolve(wctx, a.Account, a.ID, resp.GetDecision(), approver, store.ResolveOptions{Note: note})
		done()
		switch {
		case err == nil:
			s.auditApproval(ctx, eventResolved, r)
			s.log.InfoContext(ctx, "approval resolved by its reviewer", "account", a.Account, "approval", a.ID, "decision", resp.GetDecision(), "reviewer", rv.GetGateway())
			return
		case errs.KindOf(err) == errs.Conflict:
			return // a human answered first, or it expired: nothing to hand on
		}
		note = approver + " answered " + resp.GetDecision() + ", which could not be recorded (" + err.Error() + "): " + resp.GetReasoning()
	default:
		note = "reviewer " + rv.GetGateway() + " escalated: " + resp.GetReasoning()
	}
	wctx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer done()
	if err := s.store.EndReview(wctx, a.Account, a.ID, note); err != nil {
		s.log.WarnContext(ctx, "review not ended; humans are asked once its deadline passes", "account", a.Account, "approval", a.ID, "error", err)
	}
}

// useApproval lets a command run on an approval granted for exactly this
// binding, once.
func (s *Server) useApproval(ctx context.Context, account, id, digest string, out *approvalv1.AuthorizeResponse) (*approvalv1.AuthorizeResponse, error) {
	a, err := s.store.Get(ctx, account, id)
	if err != nil {
		return nil, err
	}
	out.Approval = approvalTo(a)
	if a.State == store.StateExpired && a.ResolvedBy == "fallback" {
		s.auditApproval(ctx, eventExpired, a)
	}
	if a.Binding != digest {
		return nil, errs.New(errs.PermissionDenied, "approval %s was granted for a different command, directory, environment, session or binary", id)
	}
	switch {
	case a.State == store.StatePending:
		return nil, errs.New(errs.FailedPrecondition, "approval %s is still pending", id)
	case !a.Allows():
		out.Decision, out.Reason = approvalv1.PolicyDecision_POLICY_DECISION_DENY, policy.ErrNotAllowed
		if a.State == store.StateExpired {
			out.Reason = policy.ErrTimeout
		}
		return out, nil
	}
	if err := s.store.Consume(ctx, a); err != nil {
		return nil, err
	}
	out.Decision, out.Reason = approvalv1.PolicyDecision_POLICY_DECISION_ALLOW, "approved: "+a.State+" by "+a.ResolvedBy
	out.Approval = approvalTo(a)
	return out, nil
}

// recordUse keeps lastUsedAt, lastUsedCommand and lastResolvedPath of the
// matched allowlist entries up to date. A failure is logged, not returned:
// bookkeeping never blocks a command the policy allowed.
func (s *Server) recordUse(ctx context.Context, account, agent, command string, segs []policy.Segment) {
	var uses []document.Use
	for _, seg := range segs {
		if seg.EntryID != "" {
			uses = append(uses, document.Use{EntryID: seg.EntryID, Command: command, ResolvedPath: seg.ResolvedPath})
		}
	}
	if len(uses) == 0 {
		return
	}
	at := s.cfg.Now().UnixMilli()
	_, _, err := s.store.UpdateDocument(ctx, account, func(d *document.Document) (bool, error) {
		return d.RecordUse(agent, at, uses), nil
	})
	if err != nil {
		s.log.WarnContext(ctx, "allowlist use not recorded", "account", account, "agent", agent, "error", err)
	}
}

// KeyPrefix is where the approval service keeps its state in etcd.
const KeyPrefix = "/conch/approval/"

// Run does the service's background work until ctx ends: announcing new
// approvals on chat while this replica leads, and keeping the documents in
// memory so judging a command does not wait on etcd.
func (s *Server) Run(ctx context.Context) error {
	name := s.cfg.Name
	if name == "" {
		name = document.NewID()
	}
	n := &notify.Notifier{Store: s.store, Convert: approvalTo, Logger: s.log, Name: name, Sender: s.cfg.Sender}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return n.Run(gctx) })
	g.Go(func() error { return s.store.WatchDocuments(gctx) })
	if err := g.Wait(); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
