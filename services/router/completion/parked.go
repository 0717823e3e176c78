package completion

import (
	"context"
	"log/slog"
	"time"

	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

// parkedPoll is how often a resumed call looks for its parked result.
const parkedPoll = 250 * time.Millisecond

// parkedCall is a parked call as kept: what was called, and its result
// once it ran. A resume must name the same call, name and arguments, to
// get it.
type parkedCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Ran       bool   `json:"ran"`
	Result    string `json:"result,omitempty"`
	// Until is when a call still pending was lost: the router running it
	// stopped before it could keep the result.
	Until time.Time `json:"until"`
}

// parker keeps the calls a completion parks (loop.Parker) with the turn
// keeper, for one end user of one gateway: any router replica resumes
// them, and an id from another user's conversation finds nothing.
type parker struct {
	keeper                 TurnKeeper
	account, gateway, user string
	log                    *slog.Logger
}

var _ loop.Parker = (*parker)(nil)

func (p *parker) key(call upstream.ToolCall) string {
	return "paused/" + turnKey(p.gateway, p.user, call.ID)
}

// Park keeps call as pending now, and its result once done delivers it.
func (p *parker) Park(call upstream.ToolCall, done <-chan string) {
	keep := func(v parkedCall) {
		ctx, cancel := context.WithTimeout(context.Background(), turnWriteTimeout)
		defer cancel()
		if err := p.keeper.KeepTurn(ctx, p.account, p.key(call), v); err != nil {
			p.log.Error("a paused call's state not kept", "account", p.account, "gateway", p.gateway, "call", call.ID, "error", err)
		}
	}
	keep(parkedCall{Name: call.Name, Arguments: call.Arguments, Until: time.Now().Add(loop.MaxParked)})
	go func() {
		result, ok := <-done
		if !ok {
			result = `{"stdout":"","stderr":"","error":"the command's outcome is unknown: the router running it stopped","outcome":{"type":"error"}}`
		}
		keep(parkedCall{Name: call.Name, Arguments: call.Arguments, Ran: true, Result: result})
	}()
}

// Resume returns the parked call's result, polling for it up to wait.
func (p *parker) Resume(ctx context.Context, call upstream.ToolCall, wait time.Duration) (result string, ran, found bool, err error) {
	deadline := time.Now().Add(wait)
	for {
		var v parkedCall
		got, err := p.keeper.FindTurns(ctx, p.account, []string{p.key(call)}, []any{&v})
		if err != nil {
			return "", false, false, err
		}
		// A call lost with its router is not found: it runs anew rather
		// than pause every resume until the record expires.
		if !got[0] || v.Name != call.Name || v.Arguments != call.Arguments || (!v.Ran && time.Now().After(v.Until)) {
			return "", false, false, nil
		}
		if v.Ran {
			return v.Result, true, true, nil
		}
		if time.Until(deadline) <= 0 {
			return "", false, true, nil
		}
		select {
		case <-ctx.Done():
			return "", false, true, ctx.Err()
		case <-time.After(min(parkedPoll, time.Until(deadline))):
		}
	}
}
