package loop

import (
	"context"
	"time"

	"github.com/conch-sh/conch/services/router/upstream"
)

// A completion answered in one piece cannot hold its request open while a
// command waits for a human as long as the approval may take: clients and
// proxies give up first. With Config.Pause set, a shell or editor call
// that has waited that long for an approval is parked: the command goes
// on waiting (and runs, once allowed) in the background, and the loop ends
// with FinishReason "pause_turn" and the turn so far, whose last calls
// have no results. The client sends the conversation back as it got it;
// the loop then finds those calls unanswered, takes the parked result
// (waiting up to Pause again, else pausing again) and goes on. This is
// Anthropic's pause_turn, which its clients already handle.

// PauseTurn is the finish reason of a loop that parked a call.
const PauseTurn = "pause_turn"

// MaxParked bounds how long a parked command may go on in the background:
// longer than any approval waits. A call still pending after that was
// lost with the router that ran it.
const MaxParked = 2 * time.Hour

// Parker keeps parked calls' results for the requests that resume them,
// on any router.
type Parker interface {
	// Park keeps call as pending, then its result once done delivers it
	// (done is closed without a value when the command ended without
	// one, the router going down, say).
	Park(call upstream.ToolCall, done <-chan string)
	// Resume returns the result of the parked call, waiting up to wait
	// for it: ran false when it is still pending, found false when no
	// call with its id, name and arguments was parked.
	Resume(ctx context.Context, call upstream.ToolCall, wait time.Duration) (result string, ran, found bool, err error)
}

// pausable reports whether call may be parked: a command, which may wait
// for an approval, in a completion answered in one piece.
func (cfg *Config) pausable(call upstream.ToolCall, ev Events) bool {
	return ev == nil && cfg.Pause > 0 && cfg.Parker != nil && (call.Name == "shell" || call.Name == EditorTool)
}

// pendingEvents hears, for a completion without a stream, that its
// command waits for an approval.
type pendingEvents struct{ pending chan<- struct{} }

func (pendingEvents) Delta(string) error { return nil }
func (pendingEvents) KeepAlive() error   { return nil }
func (e pendingEvents) Tool(ev ToolEvent) error {
	if ev.Event == "approval_pending" {
		select {
		case e.pending <- struct{}{}:
		default:
		}
	}
	return nil
}

// runPausable runs call as runServerTool does, in the background on a copy
// of cfg, so that it can go on once parked: paused says it was, and then
// there is no result yet. A call that ends before that is merged back
// into cfg and res as if it had run in place.
func (cfg *Config) runPausable(ctx context.Context, res *Result, call upstream.ToolCall) (result string, paused bool) {
	bg := *cfg
	bg.egress, bg.egressOmitted = nil, 0
	scratch := &Result{ShellCommands: res.ShellCommands}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), MaxParked)
	pending := make(chan struct{}, 1)
	done := make(chan string, 1)
	go func() {
		defer cancel()
		defer close(done)
		done <- bg.serverTool(bctx, scratch, call, pendingEvents{pending})
	}()
	merge := func(r string) string {
		res.ShellCommands = scratch.ShellCommands
		for _, c := range scratch.Egress {
			res.egress.Add(c, c.Decision == "allowed")
		}
		res.egress.Omit(scratch.EgressOmitted)
		res.Egress, res.EgressOmitted = res.egress.Kept(), res.egress.Omitted()
		cfg.sandbox, cfg.abort = bg.sandbox, bg.abort
		return r
	}
	var timeout <-chan time.Time
	for {
		select {
		case r := <-done:
			return merge(r), false
		case <-pending:
			timeout = time.After(cfg.Pause)
		case <-timeout:
			cfg.Parker.Park(call, done)
			// The command is this completion's, as serverTool counts it.
			res.ShellCommands++
			return "", true
		case <-ctx.Done():
			// The client went away before the call was parked: it ends,
			// as a command of a completion does.
			cancel()
			return merge(<-done), false
		}
	}
}

// resume answers the unanswered server calls a conversation ends with —
// an assistant message whose last calls have no results, the turn a
// paused loop ended with — from the parked results, or by running the
// calls that never ran. paused says one is still pending: the loop pauses
// again.
func (cfg *Config) resume(ctx context.Context, res *Result, req *upstream.Request, ev Events) (paused bool, err error) {
	n := len(req.Messages)
	last := -1
	for i := n - 1; i >= 0; i-- {
		if req.Messages[i].Role == "assistant" {
			last = i
			break
		}
		if req.Messages[i].Role != "tool" {
			return false, nil
		}
	}
	if last < 0 || len(req.Messages[last].ToolCalls) == 0 {
		return false, nil
	}
	answered := map[string]bool{}
	for _, m := range req.Messages[last+1:] {
		answered[m.ToolCallID] = true
	}
	for _, call := range req.Messages[last].ToolCalls {
		if answered[call.ID] || !cfg.isServerTool(call.Name) {
			continue
		}
		// A stream may wait as long as the command does, kept alive.
		wait, stop := cfg.Pause, func() {}
		if ev != nil {
			wait, stop = MaxParked, keepAlive(ctx, ev)
		}
		result, ran, found, err := cfg.Parker.Resume(ctx, call, wait)
		stop()
		if err != nil {
			return false, err
		}
		switch {
		case found && !ran:
			return true, nil
		case found:
			if ev != nil {
				// A stream shows the result, whose call it showed before.
				_ = ev.Tool(ToolEvent{Event: "tool_result", ID: call.ID, Name: call.Name, Result: result})
			}
			cfg.answer(res, req, call, result)
		default:
			// A call the paused loop never reached: it runs now, and
			// may pause in turn.
			if paused, err := cfg.callServer(ctx, res, req, call, ev); err != nil || paused {
				return paused, err
			}
		}
	}
	return false, nil
}
