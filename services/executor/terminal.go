package executor

import (
	"context"
	"errors"
	"io"
	"time"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// TerminalCommand is what a terminal runs, and what the exec policy judges
// for it: a login shell.
const TerminalCommand = "exec /bin/sh -l"

// MaxTerminalSize bounds a terminal's rows and columns.
const MaxTerminalSize = 1000

// terminalQueue bounds the output chunks a terminal holds for a slow
// client before the sandbox waits for it.
const terminalQueue = 1024

// terminal is a login shell on a terminal in a sandbox.
type terminal struct {
	e    *entry
	proc *sandbox.Process
	out  chan []byte // closed once the shell ended and its output is in
	p    ExecParams
}

// openTerminal judges a login shell in account's sandbox id as its
// gateway's policy judges any command (a refusal is PermissionDenied with
// the policy's reason), then starts it on a terminal of rows by cols.
func (s *Service) openTerminal(ctx context.Context, account string, start *executorv1.TerminalStart, rows, cols uint16, ev ExecEvents) (*terminal, error) {
	p := ExecParams{SandboxID: start.GetSandboxId(), Command: TerminalCommand, Pty: true, Agent: start.GetAgent(), Settings: start.GetSettings()}
	t, err := s.target(ctx, account, &p)
	if err != nil {
		return nil, err
	}
	if t.e == nil {
		return nil, errs.New(errs.InvalidArgument, "sandbox_id: a terminal is in a sandbox")
	}
	plan, refusal, err := s.authorize(ctx, account, t, &p, ev)
	if err != nil {
		return nil, err
	}
	if refusal != "" {
		return nil, errs.New(errs.PermissionDenied, "terminal refused: %s", refusal)
	}
	p.Plan, p.Workdir = plan, t.dir
	command := p.Command
	if plan != "" {
		command = plan
	}
	term := &terminal{e: t.e, out: make(chan []byte, terminalQueue), p: p}
	term.proc, err = t.e.sb.Start(sandbox.Options{
		Command: command, Workdir: t.dir, Pty: true, Rows: rows, Cols: cols, Budget: -1,
		OnOutput: func(_ sandbox.Stream, b []byte) {
			t.e.touch()
			term.out <- append([]byte(nil), b...)
		},
	})
	if err != nil {
		return nil, err
	}
	t.e.touch()
	go func() {
		<-term.proc.Done()
		close(term.out)
	}()
	return term, nil
}

// Terminal serves a terminal: its first message opens it, then keystrokes
// and sizes go in and its output comes out, until the shell exits, the
// client goes, or nothing passes either way for the sandbox's idle time.
func (s *Server) Terminal(stream executorv1.ExecutorService_TerminalServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	account, err := tenant.Account(ctx)
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return errs.New(errs.InvalidArgument, "the first message of a terminal must be start")
	}
	rows, cols, err := terminalSize("start.size", start.GetSize())
	if err != nil {
		return err
	}
	term, err := s.svc.openTerminal(ctx, account, start, rows, cols, execStream{terminalEvents{stream}})
	if err != nil {
		return err
	}
	// Whatever ends the terminal ends its shell, and its output is
	// drained so that the sandbox never waits on a client that left; the
	// session goes to the audit trail as the command it ran.
	var res *Result
	defer func() {
		_ = term.proc.Kill()
		go func() {
			for range term.out {
			}
		}()
		if res == nil {
			res = &Result{Outcome: OutcomeError, Error: "the terminal was closed"}
		}
		_ = s.svc.auditOutcome(context.WithoutCancel(ctx), account, &term.p, res, nil, egressSeen{})
	}()
	activity := make(chan struct{}, 1)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case activity <- struct{}{}:
			default:
			}
			switch m := m.GetMessage().(type) {
			case *executorv1.TerminalRequest_Input:
				term.e.touch()
				if err := term.proc.Write(m.Input, false); err != nil {
					recvErr <- err
					return
				}
			case *executorv1.TerminalRequest_Resize:
				r, c, err := terminalSize("resize", m.Resize)
				if err != nil {
					recvErr <- err
					return
				}
				_ = term.proc.Resize(r, c)
			default:
				recvErr <- errs.New(errs.InvalidArgument, "a terminal takes start only first")
				return
			}
		}
	}()
	idle := term.e.idle
	var timer <-chan time.Time
	var t *time.Timer
	if idle > 0 {
		t = time.NewTimer(idle)
		defer t.Stop()
		timer = t.C
	}
	exit := func(code int32, reason string) error {
		return stream.Send(&executorv1.TerminalResponse{Message: &executorv1.TerminalResponse_Exit{Exit: &executorv1.TerminalExit{ExitCode: code, Reason: reason}}})
	}
	for {
		select {
		case b, ok := <-term.out:
			if !ok {
				x := term.proc.Exit()
				code := int32(x.Code)
				if x.Err != nil {
					code = -1
				}
				res = &Result{Outcome: OutcomeExit, ExitCode: int(code)}
				return exit(code, "")
			}
			if err := stream.Send(&executorv1.TerminalResponse{Message: &executorv1.TerminalResponse_Output{Output: b}}); err != nil {
				return err
			}
			if t != nil {
				t.Reset(idle)
			}
		case <-activity:
			if t != nil {
				t.Reset(idle)
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
				return nil // the client left
			}
			return err
		case <-timer:
			return exit(-1, "idle: nothing passed for "+idle.String())
		}
	}
}

// terminalEvents sends a terminal's pending approval as its own event.
type terminalEvents struct {
	stream executorv1.ExecutorService_TerminalServer
}

func (t terminalEvents) Send(ev *executorv1.ExecResponse) error {
	if a := ev.GetApprovalPending(); a != nil {
		return t.stream.Send(&executorv1.TerminalResponse{Message: &executorv1.TerminalResponse_ApprovalPending{ApprovalPending: a}})
	}
	return nil
}

// terminalSize reads a size; none is 24 by 80.
func terminalSize(field string, sz *executorv1.TerminalSize) (uint16, uint16, error) {
	if sz == nil {
		return 24, 80, nil
	}
	r, c := sz.GetRows(), sz.GetCols()
	if r < 1 || c < 1 || r > MaxTerminalSize || c > MaxTerminalSize {
		return 0, 0, errs.New(errs.InvalidArgument, "%s: rows and cols must be 1 to %d, got %d by %d", field, MaxTerminalSize, r, c)
	}
	return uint16(r), uint16(c), nil
}
