// Package executor is the executor service: it owns sandboxes and runs
// commands in them. server.go and server_files.go hold the thin gRPC
// handlers; the domain is in service.go, exec.go and files.go, the
// sandboxes in sandbox/, process records in process/.
package executor

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/approval/gate"
	"github.com/conch-sh/conch/services/executor/process"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/executor/toolshim"
	"github.com/conch-sh/conch/services/internal/ceiling"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/skillfs"
	"github.com/conch-sh/conch/services/internal/toolresult"
)

// Server serves ExecutorService over a Service.
type Server struct {
	executorv1.UnsafeExecutorServiceServer
	svc *Service
}

var _ executorv1.ExecutorServiceServer = (*Server)(nil)

// NewServer returns the gRPC face of svc.
func NewServer(svc *Service) *Server { return &Server{svc: svc} }

// WithApprovals makes Exec ask the approval service before running a command
// whose exec policy is not the sandbox's full/off default
// (docs/explanation/exec-policy.md), or whose account's exec-approvals
// document holds deny rules for its agent, which rules tells from a watch;
// without c such commands are refused. A nil rules asks c about every
// command.
func (s *Server) WithApprovals(c gate.Client, rules DenyRules) *Server {
	s.svc.approvals, s.svc.denyRules = c, rules
	return s
}

// DenyRules tells whether an account's exec-approvals document holds deny
// rules for an agent (the defaults' or the agent's own), from memory; ok
// is false while it cannot tell (package approval/store keeps one).
type DenyRules interface {
	HasDenyRules(account, agent string) (has, ok bool)
}

// ResolveCommand implements ExecutorService.
func (s *Server) ResolveCommand(ctx context.Context, req *executorv1.ResolveCommandRequest) (*executorv1.ResolveCommandResponse, error) {
	if _, err := tenant.Account(ctx); err != nil {
		return nil, err
	}
	segs, err := s.svc.ResolveCommand(req.GetCommand(), req.GetCwd(), req.GetPathPrepend())
	if err != nil {
		return nil, err
	}
	return &executorv1.ResolveCommandResponse{Segments: segs}, nil
}

// skillsFrom reads the skills of a request.
func skillsFrom(pb []*executorv1.SkillBundle) []skillfs.Skill {
	out := make([]skillfs.Skill, len(pb))
	for i, b := range pb {
		out[i].Name, out[i].ID, out[i].Version = b.GetName(), b.GetId(), b.GetVersion()
		for _, f := range b.GetFiles() {
			out[i].Files = append(out[i].Files, skillfs.File{Path: f.GetPath(), Mode: f.GetMode(), Content: f.GetContent()})
		}
	}
	return out
}

// Register registers the service's gRPC handlers on g.
func (s *Server) Register(g *grpc.Server) {
	executorv1.RegisterExecutorServiceServer(g, s)
}

// limitsFrom checks the limits a tenant asked for against the floors and
// the operator's ceilings c.
func limitsFrom(l *executorv1.Limits, c ceiling.Config) (sandbox.Limits, error) {
	if l == nil {
		return sandbox.Limits{}, nil
	}
	if err := ceiling.CheckLimits("limits.", l, c); err != nil {
		return sandbox.Limits{}, err
	}
	return sandbox.Limits{
		MemoryBytes: l.GetMemoryBytes(), Pids: l.GetPids(), CPUMillicores: l.GetCpuMillicores(),
		WorkspaceBytes: l.GetEphemeralWorkspaceBytes(), WorkspaceFiles: l.GetWorkspaceFiles(),
	}, nil
}

// CreateSandbox builds a sandbox for the caller's account.
func (s *Server) CreateSandbox(ctx context.Context, req *executorv1.CreateSandboxRequest) (*executorv1.CreateSandboxResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	p, err := paramsFrom(req, s.svc.ceil)
	if err != nil {
		return nil, err
	}
	e, id, err := s.svc.Create(ctx, account, p)
	if err != nil {
		return nil, err
	}
	return &executorv1.CreateSandboxResponse{Id: id, Sandbox: s.sandboxPB(id, e)}, nil
}

// paramsFrom checks a create request against the floors and the
// operator's ceilings c and returns what to build: the one reading of a
// request, for a create and for the resume of a paused sandbox.
func paramsFrom(req *executorv1.CreateSandboxRequest, c ceiling.Config) (CreateParams, error) {
	limits, err := limitsFrom(req.GetLimits(), c)
	if err != nil {
		return CreateParams{}, err
	}
	if req.GetPersistent() {
		// A persistent workspace has its own quota.
		limits.WorkspaceBytes = req.GetLimits().GetWorkspaceBytes()
	}
	idle, err := c.Idle("idle_timeout_seconds", int64(req.GetIdleTimeoutSeconds()))
	if err != nil {
		return CreateParams{}, err
	}
	ttl, err := c.Lifetime("ttl_seconds", int64(req.GetTtlSeconds()))
	if err != nil {
		return CreateParams{}, err
	}
	if err := checkLabels("labels", req.GetLabels()); err != nil {
		return CreateParams{}, err
	}
	var tools []toolshim.Tool
	for i, t := range req.GetTools() {
		if !toolName.MatchString(t.GetName()) {
			return CreateParams{}, errs.New(errs.InvalidArgument, "tools[%d].name: must be 1-64 characters of [A-Za-z0-9_-], starting with a letter", i)
		}
		tools = append(tools, toolshim.Tool{Name: t.GetName(), Description: t.GetDescription(), Schema: json.RawMessage(t.GetParametersSchema())})
	}
	network, err := networkFrom(req.GetNetwork(), req.GetAgent())
	if err != nil {
		return CreateParams{}, err
	}
	skills := skillsFrom(req.GetSkills())
	// The router checked the skills when they were uploaded; the executor
	// writes nothing it has not checked itself.
	if err := skillfs.Check("skills", skills); err != nil {
		return CreateParams{}, errs.New(errs.InvalidArgument, "%v", err)
	}
	return CreateParams{
		Skills: skills,
		Tools:  tools,
		User:   req.GetUser(), Persistent: req.GetPersistent(), Limits: limits,
		Network:     network,
		PathPrepend: req.GetPathPrepend(), Session: req.GetSession(),
		Idle: idle, TTL: ttl, Labels: req.GetLabels(),
		Name: req.GetName(), Snapshot: req.GetSnapshot(),
		PauseWhenIdle: req.GetPauseWhenIdle(), Template: req.GetTemplate(),
		Request: req,
	}, nil
}

func (s *Server) sandboxPB(id string, e *entry) *executorv1.Sandbox {
	l := sandbox.DefaultLimits
	if e.limits.MemoryBytes > 0 {
		l.MemoryBytes = e.limits.MemoryBytes
	}
	if e.limits.Pids > 0 {
		l.Pids = e.limits.Pids
	}
	if e.limits.CPUMillicores > 0 {
		l.CPUMillicores = e.limits.CPUMillicores
	}
	if e.limits.WorkspaceBytes > 0 {
		l.WorkspaceBytes = e.limits.WorkspaceBytes
	}
	pl := &executorv1.Limits{
		MemoryBytes: l.MemoryBytes, Pids: l.Pids, CpuMillicores: l.CPUMillicores,
		WorkspaceBytes: PersistentWorkspaceBytes, WorkspaceFiles: l.WorkspaceFiles, EphemeralWorkspaceBytes: sandbox.DefaultLimits.WorkspaceBytes,
	}
	if e.persistent {
		pl.WorkspaceBytes = l.WorkspaceBytes
	} else {
		pl.EphemeralWorkspaceBytes = l.WorkspaceBytes
	}
	state := executorv1.SandboxState_SANDBOX_STATE_READY
	select {
	case <-e.sb.Done():
		state = executorv1.SandboxState_SANDBOX_STATE_GONE
	default:
	}
	unsaved, omitted := e.ws.Unsaved()
	upb := make([]*executorv1.UnsavedPath, 0, len(unsaved))
	for _, u := range unsaved {
		upb = append(upb, &executorv1.UnsavedPath{Path: u.Display(), Reason: u.Reason})
	}
	var expires *timestamppb.Timestamp
	if end := e.expiresAt(); !end.IsZero() {
		expires = timestamppb.New(end)
	}
	return &executorv1.Sandbox{
		TtlSeconds: int32(min(e.ttl/time.Second, math.MaxInt32)), ExpiresAt: expires, Labels: e.labels, Snapshot: e.snapshot, PauseWhenIdle: e.params.PauseWhenIdle, Template: e.params.Template, Agent: e.params.Request.GetAgent(),
		Id: id, Name: e.name, User: e.user, Persistent: e.persistent, State: state, Executor: s.svc.name, Session: e.session,
		Unsaved: upb, UnsavedOmitted: int32(omitted),
		Limits:             pl,
		Network:            e.network.pb(),
		Cwd:                e.sb.Cwd(),
		CreatedAt:          timestamppb.New(e.created),
		LastUsedAt:         timestamppb.New(e.idleSince()),
		IdleTimeoutSeconds: int32(e.idle / time.Second),
		Skills:             e.skills,
	}
}

// GetSandbox returns one of the caller's sandboxes.
func (s *Server) GetSandbox(ctx context.Context, req *executorv1.GetSandboxRequest) (*executorv1.GetSandboxResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	e, err := s.svc.lookup(ctx, account, req.GetId())
	if errs.KindOf(err) == errs.NotFound {
		if p, _, perr := s.svc.pausedRecord(ctx, account, req.GetId()); perr != nil || p != nil {
			if perr != nil {
				return nil, perr
			}
			sb, err := pausedPB(req.GetId(), p)
			return &executorv1.GetSandboxResponse{Sandbox: sb}, err
		}
	}
	if err != nil {
		return nil, err
	}
	return &executorv1.GetSandboxResponse{Sandbox: s.sandboxPB(req.GetId(), e)}, nil
}

// ListSandboxes lists the caller's sandboxes on this executor.
func (s *Server) ListSandboxes(ctx context.Context, req *executorv1.ListSandboxesRequest) (*executorv1.ListSandboxesResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	sel, err := parseSelector("label", req.GetLabel())
	if err != nil {
		return nil, err
	}
	m := s.svc.List(account, req.GetUser())
	// Every executor lists the account's paused sandboxes; the router
	// keeps one of each.
	paused, err := s.svc.listPaused(ctx, account, req.GetUser())
	if err != nil {
		return nil, err
	}
	all := make([]*executorv1.Sandbox, 0, len(m)+len(paused))
	for _, id := range sortedIDs(m) {
		all = append(all, s.sandboxPB(id, m[id]))
	}
	for _, id := range pausedIDs(paused) {
		if _, live := m[id]; !live {
			all = append(all, paused[id])
		}
	}
	resp := &executorv1.ListSandboxesResponse{Sandboxes: []*executorv1.Sandbox{}}
	for _, sb := range all {
		if st := req.GetStatus(); !sel.matches(sb.GetLabels()) || st != executorv1.SandboxState_SANDBOX_STATE_UNSPECIFIED && sb.GetState() != st {
			continue
		}
		resp.Sandboxes = append(resp.Sandboxes, sb)
	}
	return resp, nil
}

// SnapshotSandbox saves one of the caller's sandboxes' writable state.
func (s *Server) SnapshotSandbox(ctx context.Context, req *executorv1.SnapshotSandboxRequest) (*executorv1.SnapshotSandboxResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := s.svc.Snapshot(ctx, account, req.GetSandboxId(), req.GetName())
	if err != nil {
		return nil, err
	}
	return &executorv1.SnapshotSandboxResponse{Snapshot: snapshotPB(rec)}, nil
}

// ForkSandbox copies one of the caller's sandboxes.
func (s *Server) ForkSandbox(ctx context.Context, req *executorv1.ForkSandboxRequest) (*executorv1.ForkSandboxResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	entries, ids, err := s.svc.Fork(ctx, account, req.GetSandboxId(), int(req.GetCount()))
	if err != nil {
		return nil, err
	}
	out := &executorv1.ForkSandboxResponse{}
	for i, e := range entries {
		out.Sandboxes = append(out.Sandboxes, s.sandboxPB(ids[i], e))
	}
	return out, nil
}

// PauseSandbox pauses one of the caller's sandboxes.
func (s *Server) PauseSandbox(ctx context.Context, req *executorv1.PauseSandboxRequest) (*executorv1.PauseSandboxResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	sb, err := s.svc.Pause(ctx, account, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return &executorv1.PauseSandboxResponse{Sandbox: sb}, nil
}

// ResumeSandbox resumes one of the caller's paused sandboxes.
func (s *Server) ResumeSandbox(ctx context.Context, req *executorv1.ResumeSandboxRequest) (*executorv1.ResumeSandboxResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	e, err := s.svc.Resume(ctx, account, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return &executorv1.ResumeSandboxResponse{Sandbox: s.sandboxPB(req.GetSandboxId(), e)}, nil
}

// ListSnapshots lists the caller's snapshots.
func (s *Server) ListSnapshots(ctx context.Context, _ *executorv1.ListSnapshotsRequest) (*executorv1.ListSnapshotsResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := s.svc.ListSnapshots(ctx, account)
	if err != nil {
		return nil, err
	}
	out := &executorv1.ListSnapshotsResponse{Snapshots: make([]*executorv1.Snapshot, 0, len(recs))}
	for _, r := range recs {
		out.Snapshots = append(out.Snapshots, snapshotPB(r))
	}
	return out, nil
}

// GetSnapshot returns one of the caller's snapshots.
func (s *Server) GetSnapshot(ctx context.Context, req *executorv1.GetSnapshotRequest) (*executorv1.GetSnapshotResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := s.svc.GetSnapshot(ctx, account, req.GetId())
	if err != nil {
		return nil, err
	}
	return &executorv1.GetSnapshotResponse{Snapshot: snapshotPB(rec)}, nil
}

// DeleteSnapshot deletes one of the caller's snapshots.
func (s *Server) DeleteSnapshot(ctx context.Context, req *executorv1.DeleteSnapshotRequest) (*executorv1.DeleteSnapshotResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.svc.DeleteSnapshot(ctx, account, req.GetId()); err != nil {
		return nil, err
	}
	return &executorv1.DeleteSnapshotResponse{}, nil
}

func snapshotPB(r *workspacev1.SnapshotRecord) *executorv1.Snapshot {
	return &executorv1.Snapshot{Id: r.GetId(), Name: r.GetName(), SandboxId: r.GetSandboxId(), SizeBytes: r.GetSizeBytes(), CreatedAt: r.GetCreatedAt(), Template: r.GetTemplate()}
}

// DestroySandbox ends one of the caller's sandboxes.
func (s *Server) DestroySandbox(ctx context.Context, req *executorv1.DestroySandboxRequest) (*executorv1.DestroySandboxResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	err = s.svc.Destroy(ctx, account, req.GetId())
	if errs.KindOf(err) == errs.NotFound {
		if was, perr := s.svc.destroyPaused(ctx, account, req.GetId()); was || perr != nil {
			err = perr
		}
	}
	if err != nil {
		return nil, err
	}
	return &executorv1.DestroySandboxResponse{}, nil
}

// toolName is the shape of a tool command's name.
var toolName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

// execStream sends Exec events on a gRPC stream.
type execStream struct {
	stream interface {
		Send(*executorv1.ExecResponse) error
	}
}

func (x execStream) Started(id string) error {
	return x.stream.Send(&executorv1.ExecResponse{Event: &executorv1.ExecResponse_Started{Started: id}})
}

func (x execStream) Output(st sandbox.Stream, b []byte) error {
	name := executorv1.StreamName_STREAM_NAME_STDOUT
	if st == sandbox.Stderr {
		name = executorv1.StreamName_STREAM_NAME_STDERR
	}
	return x.stream.Send(&executorv1.ExecResponse{Event: &executorv1.ExecResponse_Output{Output: &executorv1.Output{Stream: name, Data: b}}})
}

func (x execStream) StillRunning(since time.Time) error {
	return x.stream.Send(&executorv1.ExecResponse{Event: &executorv1.ExecResponse_StillRunning{StillRunning: timestamppb.New(since)}})
}

func (x execStream) ApprovalPending(a *approvalv1.Approval) error {
	return x.stream.Send(&executorv1.ExecResponse{Event: &executorv1.ExecResponse_ApprovalPending{ApprovalPending: &executorv1.ApprovalPending{Approval: a}}})
}

func (x execStream) Backgrounded(id string) error {
	return x.stream.Send(&executorv1.ExecResponse{Event: &executorv1.ExecResponse_Backgrounded{Backgrounded: &executorv1.Backgrounded{ProcessId: id}}})
}

// Exec runs a command, streaming its events.
func (s *Server) Exec(req *executorv1.ExecRequest, stream executorv1.ExecutorService_ExecServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	switch req.GetHost() {
	case approvalv1.Host_HOST_UNSPECIFIED, approvalv1.Host_HOST_SANDBOX, approvalv1.Host_HOST_GATEWAY, approvalv1.Host_HOST_NODE:
	default:
		return errs.New(errs.InvalidArgument, "host: must be sandbox, gateway or node")
	}
	timeout, err := seconds("timeout_seconds", req.GetTimeoutSeconds(), DefaultExecTimeout, MaxExecTimeout, s.svc.ceil)
	if err != nil {
		return err
	}
	maxOut, err := outputLimit(req.GetMaxOutputLength(), s.svc.ceil)
	if err != nil {
		return err
	}
	if req.GetYieldMs() < 0 {
		return errs.New(errs.InvalidArgument, "yield_ms: must not be negative")
	}
	notice := time.Duration(req.GetSettings().GetApprovalRunningNoticeMs()) * time.Millisecond
	switch {
	case notice < 0:
		return errs.New(errs.InvalidArgument, "settings.approval_running_notice_ms: must not be negative")
	case notice == 0:
		notice = 10 * time.Second
	}
	res, err := s.svc.Exec(ctx, account, ExecParams{
		SandboxID: req.GetSandboxId(), Command: req.GetCommand(), Workdir: req.GetWorkdir(), Env: req.GetEnv(),
		Timeout: timeout, MaxOutput: maxOut, Pty: req.GetPty(), Yield: time.Duration(req.GetYieldMs()) * time.Millisecond,
		Background: req.GetBackground(), Notify: req.GetSettings().GetNotifyOnExit(),
		Notice: notice, PathPrepend: req.GetSettings().GetPathPrepend(),
		Host: req.GetHost(), Node: req.GetNode(), Settings: req.GetSettings(),
		Agent: req.GetAgent(), Session: req.GetSession(), User: req.GetUser(),
	}, execStream{stream})
	if err != nil || res == nil {
		return err
	}
	return stream.Send(finishedPB(res))
}

// finishedPB is a command's last event.
func finishedPB(res *Result) *executorv1.ExecResponse {
	return &executorv1.ExecResponse{Event: &executorv1.ExecResponse_Finished{Finished: &executorv1.Finished{
		Outcome: outcomePB(res), Error: res.Error, StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		DurationMs: res.Duration.Milliseconds(), Egress: res.Egress, EgressOmitted: res.EgressOmitted,
	}}}
}

func outcomePB(r *Result) *executorv1.Outcome {
	switch r.Outcome {
	case OutcomeExit:
		code := int32(r.ExitCode)
		return &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: &code}
	case OutcomeTimeout:
		return &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_TIMEOUT}
	}
	return &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_ERROR}
}

// seconds is a command's timeout: def for 0, else v seconds at most
// maxD (the protocol's bound) and the operator's ceiling c.
func seconds(field string, v int32, def, maxD time.Duration, c ceiling.Config) (time.Duration, error) {
	if v < 0 {
		return 0, errs.New(errs.InvalidArgument, "%s: must not be negative", field)
	}
	if err := ceiling.CheckSeconds(field, int64(v), min(maxD, c.CommandTimeout)); err != nil {
		return 0, err
	}
	if v == 0 {
		return min(def, c.CommandTimeout), nil
	}
	return time.Duration(v) * time.Second, nil
}

// outputLimit is a command's output bound: the default for 0, else v at
// most the operator's ceiling c.
func outputLimit(v int32, c ceiling.Config) (int, error) {
	if v < 0 {
		return 0, errs.New(errs.InvalidArgument, "max_output_length: must not be negative")
	}
	if err := ceiling.Check("max_output_length", int64(v), 1, min(MaxOutputChars, c.OutputLength)); err != nil {
		return 0, err
	}
	if v == 0 {
		return int(min(DefaultOutputChars, c.OutputLength)), nil
	}
	return int(v), nil
}

// discard drops Exec events for RunCommand, which returns only the result.
type discard struct{}

func (discard) Started(string) error                { return nil }
func (discard) Output(sandbox.Stream, []byte) error { return nil }
func (discard) Backgrounded(string) error           { return errors.New("executor: unexpected background") }
func (discard) StillRunning(time.Time) error        { return nil }

func (discard) ApprovalPending(*approvalv1.Approval) error { return nil }

// RunCommand runs a command to its end and returns the shell's result
// (docs/reference/openai-api.md).
func (s *Server) RunCommand(ctx context.Context, req *executorv1.RunCommandRequest) (*executorv1.RunCommandResponse, error) {
	account, p, err := s.runParams(ctx, &executorv1.StreamCommandRequest{
		SandboxId: req.GetSandboxId(), Command: req.GetCommand(), TimeoutSeconds: req.GetTimeoutSeconds(),
		MaxOutputLength: req.GetMaxOutputLength(), Workdir: req.GetWorkdir(), Env: req.GetEnv(),
	})
	if err != nil {
		return nil, err
	}
	res, err := s.svc.Exec(ctx, account, p, discard{})
	if err != nil {
		return nil, err
	}
	out := &executorv1.RunCommandResponse{Stdout: res.Stdout, Stderr: res.Stderr, Outcome: outcomePB(res)}
	if res.Outcome == OutcomeError {
		out.Stdout, out.Stderr = "", ""
		out.Error = &res.Error
	}
	return out, nil
}

// StreamCommand runs a command as RunCommand does, streaming its events.
func (s *Server) StreamCommand(req *executorv1.StreamCommandRequest, stream executorv1.ExecutorService_StreamCommandServer) error {
	ctx := stream.Context()
	account, p, err := s.runParams(ctx, req)
	if err != nil {
		return err
	}
	send := commandStream{stream}
	res, err := s.svc.Exec(ctx, account, p, execStream{send})
	if err != nil || res == nil {
		return err
	}
	return send.Send(finishedPB(res))
}

// commandStream sends a command's events as StreamCommand's.
type commandStream struct {
	stream executorv1.ExecutorService_StreamCommandServer
}

func (c commandStream) Send(ev *executorv1.ExecResponse) error {
	return c.stream.Send(&executorv1.StreamCommandResponse{Event: ev})
}

// runParams reads a REST command: its defaults and bounds are the
// sandbox API's (docs/reference/sandboxes.md).
func (s *Server) runParams(ctx context.Context, req *executorv1.StreamCommandRequest) (string, ExecParams, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return "", ExecParams{}, err
	}
	timeout, err := seconds("timeout_seconds", req.GetTimeoutSeconds(), DefaultRunTimeout, MaxRunTimeout, s.svc.ceil)
	if err != nil {
		return "", ExecParams{}, err
	}
	maxOut, err := outputLimit(req.GetMaxOutputLength(), s.svc.ceil)
	if err != nil {
		return "", ExecParams{}, err
	}
	return account, ExecParams{
		SandboxID: req.GetSandboxId(), Command: req.GetCommand(), Workdir: req.GetWorkdir(), Env: req.GetEnv(),
		Timeout: timeout, MaxOutput: maxOut,
	}, nil
}

func processPB(p process.Snapshot) *executorv1.Process {
	pb := &executorv1.Process{
		Id: p.ID, SandboxId: p.SandboxID, Command: p.Command, Pty: p.Pty, OutputBytes: p.OutputBytes,
		StartedAt: timestamppb.New(p.StartedAt), State: executorv1.ProcessState_PROCESS_STATE_RUNNING,
	}
	if !p.Running {
		pb.State = executorv1.ProcessState_PROCESS_STATE_EXITED
		pb.EndedAt = timestamppb.New(p.EndedAt)
		r := &Result{Outcome: OutcomeExit, ExitCode: p.ExitCode}
		switch {
		case p.TimedOut:
			r.Outcome = OutcomeTimeout
		case p.Error != "":
			r.Outcome = OutcomeError
		}
		pb.Outcome = outcomePB(r)
	}
	return pb
}

func (s *Server) record(ctx context.Context, sandboxID, processID string) (*process.Record, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.svc.lookup(ctx, account, sandboxID); err != nil {
		return nil, err
	}
	r, err := s.svc.procs.Get(sandboxID, processID)
	if err != nil {
		return nil, errs.New(errs.NotFound, "process %q not found in sandbox %q", processID, sandboxID)
	}
	return r, nil
}

// ListProcesses lists a sandbox's processes.
func (s *Server) ListProcesses(ctx context.Context, req *executorv1.ListProcessesRequest) (*executorv1.ListProcessesResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.svc.lookup(ctx, account, req.GetSandboxId()); err != nil {
		return nil, err
	}
	resp := &executorv1.ListProcessesResponse{Processes: []*executorv1.Process{}}
	for _, p := range s.svc.procs.List(req.GetSandboxId()) {
		resp.Processes = append(resp.Processes, processPB(p))
	}
	return resp, nil
}

// maxPollWait bounds how long a poll may wait.
const maxPollWait = 60 * time.Second

// PollProcess returns a process's output since the previous poll.
func (s *Server) PollProcess(ctx context.Context, req *executorv1.PollProcessRequest) (*executorv1.PollProcessResponse, error) {
	if req.GetWaitMs() < 0 || time.Duration(req.GetWaitMs())*time.Millisecond > maxPollWait {
		return nil, errs.New(errs.InvalidArgument, "wait_ms: must be between 0 and %d", maxPollWait.Milliseconds())
	}
	r, err := s.record(ctx, req.GetSandboxId(), req.GetProcessId())
	if err != nil {
		return nil, err
	}
	snap, out, truncated := r.Poll(ctx, time.Duration(req.GetWaitMs())*time.Millisecond, 4*DefaultOutputChars)
	text, cutMore := toolresult.Cut(string(out), DefaultOutputChars)
	return &executorv1.PollProcessResponse{Process: processPB(snap), Output: text, Truncated: truncated || cutMore}, nil
}

// ReadProcessLog reads lines of a process's recorded output.
func (s *Server) ReadProcessLog(ctx context.Context, req *executorv1.ReadProcessLogRequest) (*executorv1.ReadProcessLogResponse, error) {
	if req.GetOffset() < 0 || req.GetLimit() < 0 {
		return nil, errs.New(errs.InvalidArgument, "offset and limit: must not be negative")
	}
	r, err := s.record(ctx, req.GetSandboxId(), req.GetProcessId())
	if err != nil {
		return nil, err
	}
	text, next, total := r.Lines(req.GetOffset(), req.GetLimit(), 64<<10)
	return &executorv1.ReadProcessLogResponse{Log: text, NextOffset: next, TotalLines: total}, nil
}

// WriteProcess writes to a process's standard input.
func (s *Server) WriteProcess(ctx context.Context, req *executorv1.WriteProcessRequest) (*executorv1.WriteProcessResponse, error) {
	if len(req.GetData()) > 1<<20 {
		return nil, errs.New(errs.InvalidArgument, "data: at most 1 MiB per write")
	}
	r, err := s.record(ctx, req.GetSandboxId(), req.GetProcessId())
	if err != nil {
		return nil, err
	}
	if !r.Snapshot().Running {
		return nil, errs.New(errs.FailedPrecondition, "process %q has exited", req.GetProcessId())
	}
	if err := r.Write(req.GetData(), req.GetEof()); err != nil {
		return nil, errs.Wrap(errs.FailedPrecondition, err, "write to process %q", req.GetProcessId())
	}
	return &executorv1.WriteProcessResponse{}, nil
}

// KillProcess kills a process and its tree and returns it once ended.
func (s *Server) KillProcess(ctx context.Context, req *executorv1.KillProcessRequest) (*executorv1.KillProcessResponse, error) {
	r, err := s.record(ctx, req.GetSandboxId(), req.GetProcessId())
	if err != nil {
		return nil, err
	}
	if r.Snapshot().Running {
		if err := r.Kill(); err != nil {
			return nil, errs.Wrap(errs.FailedPrecondition, err, "kill process %q", req.GetProcessId())
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := r.Wait(wctx); err != nil {
			return nil, errs.Wrap(errs.Unavailable, err, "wait for process %q", req.GetProcessId())
		}
	}
	return &executorv1.KillProcessResponse{Process: processPB(r.Snapshot())}, nil
}

// WatchSandboxEvents streams a sandbox's notifications.
func (s *Server) WatchSandboxEvents(req *executorv1.WatchSandboxEventsRequest, stream executorv1.ExecutorService_WatchSandboxEventsServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	e, err := s.svc.lookup(ctx, account, req.GetSandboxId())
	if err != nil {
		return err
	}
	ch, stop := s.svc.procs.Watch(req.GetSandboxId())
	defer stop()
	for {
		select {
		case ev := <-ch:
			if err := stream.Send(&executorv1.WatchSandboxEventsResponse{Process: processPB(ev.Process), Message: ev.Message}); err != nil {
				return err
			}
		case <-e.sb.Done():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// AttachNode serves a paired node's stream, passed on by the router once it
// checked the node's token: the node runs the account's commands addressed
// to it by name until the stream ends.
func (s *Server) AttachNode(stream executorv1.ExecutorService_AttachNodeServer) error {
	ctx := stream.Context()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	return s.svc.Attach(ctx, account, stream)
}
