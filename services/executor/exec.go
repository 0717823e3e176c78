package executor

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/approval/gate"
	"github.com/conch-sh/conch/services/executor/process"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// ExecParams describe one command.
type ExecParams struct {
	SandboxID string
	// Command is the command as the caller wrote it: what its records
	// show, and what the shell runs when Plan is empty.
	Command string
	// Plan is what the shell runs in place of Command when the exec
	// policy judged the command's structure: the judged tree re-printed
	// canonically, so nothing but what was judged can run.
	Plan       string
	Workdir    string
	Env        map[string]string
	Timeout    time.Duration
	MaxOutput  int
	Pty        bool
	Yield      time.Duration
	Background bool
	Notify     bool
	// Notice is how long a foreground command runs before a still-running
	// event; 0 means never.
	Notice time.Duration
	// PathPrepend are directories put in front of PATH for this command.
	PathPrepend []string
	// Host is where the command runs: a sandbox (the default), the
	// executor's own machine (gateway) or a node. Outside a sandbox,
	// SandboxID, when set, only keeps the process records.
	Host approvalv1.Host
	// Node names the node of host node.
	Node string
	// Settings are the exec settings the command runs under; nil is the
	// sandbox's default (security full, ask off), which asks no one.
	Settings *approvalv1.ExecSettings
	// Agent, Session and User say for whom the command runs: what an
	// approval is bound to and shows.
	Agent, Session, User string
}

// outside reports whether the command runs outside its sandbox.
func (p *ExecParams) outside() bool {
	return p.Host == approvalv1.Host_HOST_GATEWAY || p.Host == approvalv1.Host_HOST_NODE
}

// Outcome kinds.
const (
	OutcomeExit    = "exit"
	OutcomeTimeout = "timeout"
	OutcomeError   = "error"
)

// Result is a finished command, as the shell's result describes it
// (docs/reference/openai-api.md).
type Result struct {
	Stdout, Stderr                   string
	StdoutTruncated, StderrTruncated bool
	Outcome                          string
	ExitCode                         int
	Error                            string
	Duration                         time.Duration
	// Egress are the sandbox's connections that ended while it ran, as
	// egress.Report keeps them; EgressOmitted counts exactly those left
	// out.
	Egress        []*executorv1.EgressConnection
	EgressOmitted int32
}

// ExecEvents receives a command's events in order.
type ExecEvents interface {
	Started(processID string) error
	Output(stream sandbox.Stream, data []byte) error
	Backgrounded(processID string) error
	StillRunning(since time.Time) error
	// ApprovalPending tells the caller a human is deciding.
	ApprovalPending(a *approvalv1.Approval) error
}

var errGatewayOff = errs.New(errs.FailedPrecondition, "host gateway: running commands on the executor host is turned off on this executor")

// proc is a running command, in a sandbox or on the host.
type proc interface {
	Done() <-chan struct{}
	Exit() sandbox.Exit
	Kill() error
	Write(data []byte, eof bool) error
}

// Exec runs a command in account's sandbox, on the gateway host or on a
// node, after the exec policy allowed it. It returns the result (a refusal
// is an error outcome with the policy's reason), or nil when the command
// moved to the background.
func (s *Service) Exec(ctx context.Context, account string, p ExecParams, ev ExecEvents) (res *Result, err error) {
	if err := validateEnv(p.Env); err != nil {
		return nil, err
	}
	if strings.ContainsRune(p.Workdir, 0) || len(p.Workdir) > 4096 {
		return nil, errs.New(errs.InvalidArgument, "workdir: must be a path without NUL bytes, at most 4096 bytes")
	}
	if strings.TrimSpace(p.Command) == "" {
		return nil, errs.New(errs.InvalidArgument, "command: must not be empty")
	}
	if err := checkPathPrepend("settings.path_prepend", p.PathPrepend); err != nil {
		return nil, err
	}
	// Found before anyone is asked to approve a command for it.
	t, err := s.target(ctx, account, &p)
	if err != nil {
		return nil, err
	}
	if p.outside() && t.e == nil {
		if p.Background {
			return nil, errs.New(errs.InvalidArgument, "background: a background command outside a sandbox needs sandbox_id to keep its records")
		}
		p.Yield = 0 // nowhere to keep a backgrounded command's records
	}
	if len(p.Command) > MaxCommandBytes {
		return &Result{Outcome: OutcomeError, Error: fmt.Sprintf("command is %d bytes, longer than the limit of %d bytes (1 MiB)", len(p.Command), MaxCommandBytes)}, nil
	}
	if p.MaxOutput <= 0 {
		p.MaxOutput = DefaultOutputChars
	}
	plan, refusal, err := s.authorize(ctx, account, t, &p, ev)
	if err != nil {
		return nil, err
	}
	if refusal != "" {
		return &Result{Outcome: OutcomeError, Error: refusal}, nil
	}
	p.Plan, p.Workdir = plan, t.dir
	inSandbox := !p.outside()
	if inSandbox {
		t.e.touch()
		defer t.e.touch()
	}
	var watch *egressWatch
	if inSandbox && t.e.egress != nil {
		watch = t.e.egress.watch()
	}
	// A command moved to the background is recorded when it ends, with the
	// connections that ended until then; the others are recorded here.
	moved := false
	background := func() backgroundEnd {
		moved = true
		return func(ctx context.Context, res *Result, proc process.Snapshot) error {
			seen := watch.take(egressSettle)
			res.Egress, res.EgressOmitted = seen.conns, seen.omitted
			err := s.auditBackground(ctx, account, &p, res, proc, seen)
			if err != nil {
				s.log.WarnContext(ctx, "audit record of a background command not written", "sandbox", p.SandboxID, "process", proc.ID, "error", err)
			}
			return err
		}
	}
	if inSandbox && s.admit != nil {
		// Once judged: a command waiting for its approval holds no slot.
		release, err := s.admit.Work(ctx)
		if err != nil {
			return nil, err
		}
		hold := time.AfterFunc(workHold, release)
		defer func() {
			hold.Stop()
			release()
		}()
	}
	res, err = s.run(ctx, t.e, t.start, p, ev, background)
	var seen egressSeen
	if !moved {
		// A command that failed is recorded with the connections that
		// ended until now, without waiting for the rest.
		settle := egressSettle
		if err != nil || res == nil {
			settle = 0
		}
		seen = watch.take(settle)
	}
	defer func() {
		if aerr := s.auditOutcome(ctx, account, &p, res, err, seen); aerr != nil && err == nil {
			res, err = nil, aerr
		}
	}()
	if err == nil && res != nil {
		res.Egress, res.EgressOmitted = seen.conns, seen.omitted
	}
	if err == nil && res != nil && inSandbox && t.e.persistent {
		// A result is only returned once its writes are durable.
		notes, ferr := t.e.ws.Flush(ctx)
		if ferr != nil {
			s.log.Warn("workspace flush failed", "sandbox", p.SandboxID, "error", ferr)
			return &Result{Outcome: OutcomeError, Error: "the command ran but its workspace changes could not be saved: " + ferr.Error(), Duration: res.Duration, Egress: res.Egress, EgressOmitted: res.EgressOmitted}, nil
		}
		for _, n := range notes {
			// Said where the command's own errors are, after them.
			line := n + "\n"
			res.Stderr += line
			if err := ev.Output(sandbox.Stderr, []byte(line)); err != nil {
				return nil, err
			}
		}
	}
	return res, err
}

// pending queues output between the sandbox's reader and the caller's
// stream, so that a slow caller never stalls the sandbox.
type pending struct {
	mu     sync.Mutex
	items  []outItem
	notify chan struct{}
	live   bool // still forwarding to the caller
}

type outItem struct {
	stream sandbox.Stream
	data   []byte
}

func (q *pending) push(st sandbox.Stream, b []byte) {
	q.mu.Lock()
	if q.live && len(b) > 0 {
		q.items = append(q.items, outItem{st, b})
	}
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *pending) take() []outItem {
	q.mu.Lock()
	defer q.mu.Unlock()
	it := q.items
	q.items = nil
	return it
}

func (q *pending) stop() {
	q.mu.Lock()
	q.live, q.items = false, nil
	q.mu.Unlock()
}

// run runs one command started by start; e, when not nil, keeps its
// process records. A command moved to the background asks background,
// as it moves, for what receives its end when its process has ended.
func (s *Service) run(ctx context.Context, e *entry, start func(sandbox.Options) (proc, error), p ExecParams, ev ExecEvents, background func() backgroundEnd) (*Result, error) {
	stdout, stderr := newCapture(p.MaxOutput), newCapture(p.MaxOutput)
	q := &pending{notify: make(chan struct{}, 1), live: !p.Background}
	budget := budgetFor(p.MaxOutput)
	if p.Background || p.Yield > 0 {
		budget = backgroundBudget
	}
	pid := "p-" + randomID()
	// The record exists before the process so that no output is missed;
	// kill and write reach the process once it is started.
	var proc proc
	procReady := make(chan struct{})
	r := process.NewRecord(pid, p.SandboxID, p.Command, p.Pty, p.Notify,
		func() error { <-procReady; return proc.Kill() },
		func(b []byte, eof bool) error { <-procReady; return proc.Write(b, eof) })
	// outMu orders output between the caller's stream and the record, so
	// that moving to the background hands over exactly what was not sent.
	var outMu sync.Mutex
	onOutput := func(st sandbox.Stream, b []byte) {
		outMu.Lock()
		defer outMu.Unlock()
		r.Append(b)
		c := stdout
		if st == sandbox.Stderr {
			c = stderr
		}
		if kept := c.write(b); kept > 0 {
			q.push(st, b[:kept])
		}
	}
	env := p.Env
	var sc trace.SpanContext
	if e != nil && e.tools != nil {
		env, sc = traceEnv(ctx, env)
	}
	var err error
	script := p.Command
	if p.Plan != "" {
		script = p.Plan
	}
	proc, err = start(sandbox.Options{
		Command: script, Workdir: p.Workdir, Env: env, Pty: p.Pty, Budget: budget,
		TrackCwd: !p.Background, OnOutput: onOutput, PathPrepend: p.PathPrepend,
	})
	close(procReady)
	if err != nil {
		if errors.Is(err, sandbox.ErrGone) {
			return nil, errs.New(errs.NotFound, "sandbox %q has ended", p.SandboxID)
		}
		if p.outside() {
			return &Result{Outcome: OutcomeError, Error: err.Error()}, nil
		}
		return nil, fmt.Errorf("executor: start command: %w", err)
	}
	started := time.Now()
	if e != nil {
		s.procs.Add(r)
		// Its tool calls join this trace for as long as it runs, in the
		// background too.
		if done := e.commandRuns(sc); done != nil {
			go func() { <-proc.Done(); done() }()
		}
	}
	if err := ev.Started(pid); err != nil {
		_ = proc.Kill()
		return nil, err
	}
	timeout := time.NewTimer(p.Timeout)
	defer timeout.Stop()
	var yield <-chan time.Time
	if p.Background {
		yield = closedTime
	} else if p.Yield > 0 {
		t := time.NewTimer(p.Yield)
		defer t.Stop()
		yield = t.C
	}
	flush := func() error {
		for _, it := range q.take() {
			if err := ev.Output(it.stream, it.data); err != nil {
				return err
			}
		}
		return nil
	}
	var notice <-chan time.Time
	if p.Notice > 0 && !p.Background {
		t := time.NewTicker(p.Notice)
		defer t.Stop()
		notice = t.C
	}
	timedOut := false
	for done := false; !done; {
		select {
		case <-notice:
			if err := ev.StillRunning(started); err != nil {
				_ = proc.Kill()
				return nil, err
			}
		case <-q.notify:
			if err := flush(); err != nil {
				_ = proc.Kill()
				return nil, err
			}
		case <-proc.Done():
			done = true
		case <-timeout.C:
			timedOut = true
			_ = proc.Kill()
			<-proc.Done()
			done = true
		case <-yield:
			outMu.Lock()
			err := flush()
			q.stop()
			r.MarkPolled()
			outMu.Unlock()
			if err != nil {
				_ = proc.Kill()
				return nil, err
			}
			go s.finishInBackground(trace.LinkFromContext(ctx), e, proc, r, !p.outside() && e.persistent, time.Until(started.Add(p.Timeout)), background())
			return nil, ev.Backgrounded(pid)
		case <-ctx.Done():
			// A caller that goes away stops the work it started.
			_ = proc.Kill()
			<-proc.Done()
			r.End(-1, false, "canceled")
			return nil, ctx.Err()
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	x := proc.Exit()
	res := &Result{Duration: time.Since(started)}
	res.Stdout, res.Stderr, res.StdoutTruncated, res.StderrTruncated = finalOutput(stdout, stderr, p.MaxOutput, x.StdoutDropped, x.StderrDropped)
	switch {
	case timedOut:
		res.Outcome = OutcomeTimeout
		r.End(-1, true, "")
	case x.Err != nil:
		res.Outcome, res.Error = OutcomeError, x.Err.Error()
		r.End(-1, false, res.Error)
	default:
		res.Outcome, res.ExitCode = OutcomeExit, x.Code
		if x.OOMKilled {
			res.Stderr += "\n[killed: the sandbox's memory limit was reached]"
		}
		r.End(x.Code, false, "")
	}
	return res, nil
}

var closedTime = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// backgroundEnd receives the end of a command moved to the background,
// under a context that carries the trace of the Exec that started it; an
// error says its audit records could not be stored (exec.audit sync).
type backgroundEnd func(ctx context.Context, res *Result, proc process.Snapshot) error

// finishInBackground enforces the timeout of a backgrounded process and
// records its end; flush saves its sandbox's persistent workspace after.
// started links that work to the Exec that started the process.
func (s *Service) finishInBackground(started trace.Link, e *entry, proc proc, r *process.Record, flush bool, left time.Duration, ended backgroundEnd) {
	t := time.NewTimer(max(left, 0))
	defer t.Stop()
	timedOut := false
	select {
	case <-proc.Done():
	case <-t.C:
		timedOut = true
		_ = proc.Kill()
		<-proc.Done()
	}
	x := proc.Exit()
	msg := ""
	res := &Result{}
	switch {
	case timedOut:
		r.End(-1, true, "")
		msg = "timed out and was killed"
		res.Outcome = OutcomeTimeout
	case x.Err != nil:
		r.End(-1, false, x.Err.Error())
		msg = "failed: " + x.Err.Error()
		res.Outcome, res.Error = OutcomeError, x.Err.Error()
	default:
		r.End(x.Code, false, "")
		msg = fmt.Sprintf("exited with code %d", x.Code)
		res.Outcome, res.ExitCode = OutcomeExit, x.Code
	}
	if flush {
		// The caller is gone and the sandbox lives on: the flush is a trace
		// of its own, linked to the command's rather than parented by a
		// request that ended long ago.
		ctx, span := tracer.Start(context.Background(), "executor.background.flush", trace.WithLinks(started),
			trace.WithAttributes(attribute.String("conch.sandbox", r.SandboxID), attribute.String("conch.process", r.ID)))
		if _, err := e.ws.Flush(ctx); err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			s.log.WarnContext(ctx, "workspace flush failed", "sandbox", r.SandboxID, "error", err)
			msg += "; its workspace changes could not be saved"
			if res.Error != "" {
				res.Error += "; "
			}
			res.Error += "its workspace changes could not be saved: " + err.Error()
		}
		span.End()
	}
	if ended != nil {
		snap := r.Snapshot()
		res.Duration = snap.EndedAt.Sub(snap.StartedAt)
		if err := ended(trace.ContextWithSpanContext(context.Background(), started.SpanContext), res, snap); err != nil {
			// No call waits for this end: its notice says so.
			msg += "; its audit records could not be stored"
		}
	}
	if r.Notify {
		s.procs.Notify(r.SandboxID, process.Event{Process: r.Snapshot(), Message: fmt.Sprintf("process %s (%s) %s", r.ID, abbreviate(r.Command, 80), msg)})
	}
}

func abbreviate(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// ResolveCommand finds the programs of command, started in cwd with
// pathPrepend, as the shell of a new sandbox would.
func (s *Service) ResolveCommand(command, cwd string, pathPrepend []string) ([]*approvalv1.Segment, error) {
	switch {
	case strings.TrimSpace(command) == "":
		return nil, errs.New(errs.InvalidArgument, "command: must not be empty")
	case len(command) > MaxCommandBytes:
		return nil, errs.New(errs.InvalidArgument, "command: longer than the limit of %d bytes (1 MiB)", MaxCommandBytes)
	case cwd == "":
		cwd = wire.WorkspaceDir
	case !path.IsAbs(cwd) || strings.ContainsRune(cwd, 0) || len(cwd) > 4096:
		return nil, errs.New(errs.InvalidArgument, "cwd: must be an absolute path without NUL bytes, at most 4096 bytes")
	}
	if err := checkPathPrepend("path_prepend", pathPrepend); err != nil {
		return nil, err
	}
	r, err := s.rt.Resolver(pathPrepend)
	if err != nil {
		return nil, err
	}
	return gate.Segments(command, path.Clean(cwd), wire.WorkspaceDir, r), nil
}

// checkPathPrepend refuses a PATH entry that is not an absolute directory
// name PATH can hold.
func checkPathPrepend(field string, dirs []string) error {
	for _, d := range dirs {
		if !strings.HasPrefix(d, "/") || strings.ContainsAny(d, ":\x00") || len(d) > 4096 {
			return errs.New(errs.InvalidArgument, "%s: %q must be an absolute path without ':'", field, d)
		}
	}
	return nil
}
