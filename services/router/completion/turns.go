package completion

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

// A completion that ends on client tool calls after running server tools
// (a "mixed" turn) answers the client with its text and the client calls
// only: the client has no way to carry the shell calls and their results,
// and chat completions are stateless. So that the model sees on the next
// request the conversation as it happened, the turn's own messages (its
// assistant turns with every tool call, and the server tools' results) are
// kept (TurnKeeper: an object store, a small record in etcd), keyed by the
// first client call's id, and put back in place of the assistant message
// the client echoes. Any router replica can do it; a turn kept longer than
// the keeper keeps it is forgotten, and the model then sees what the
// client sent.
const (
	// turnLookups bounds the lookups of one read (an etcd transaction).
	turnLookups = 64
	// turnWriteTimeout bounds keeping a turn after the client may have
	// gone.
	turnWriteTimeout = 10 * time.Second
)

// TurnKeeper keeps mixed turns (responsestore.Store).
type TurnKeeper interface {
	// KeepTurn keeps v for account under key, a '/'-separated path of
	// escaped segments.
	KeepTurn(ctx context.Context, account, key string, v any) error
	// FindTurns decodes into vs[i] the turn kept for account under
	// keys[i], when there is one: found[i].
	FindTurns(ctx context.Context, account string, keys []string, vs []any) (found []bool, err error)
}

// turnStore keeps mixed turns (see above); with no keeper, none.
type turnStore struct{ keeper TurnKeeper }

// keptTurn is a mixed turn as stored.
type keptTurn struct {
	// Client are the ids of the client tool calls the turn answered with,
	// in order: the assistant message the client echoes must carry exactly
	// these to be replaced.
	Client   []string                 `json:"client"`
	Messages []upstream.StoredMessage `json:"messages"`
}

// turnKey is the key of the turn answered with the client call id, for
// one end user of one gateway (of the account the keeper keeps it for):
// an id from another user's conversation finds nothing.
func turnKey(gateway, user, callID string) string {
	return url.PathEscape(gateway) + "/" + url.PathEscape(user) + "/" + url.PathEscape(callID)
}

// save keeps res's turn when it ended on client tool calls after server
// tools ran. It returns nil without storing when there is nothing to keep.
func (s *turnStore) save(ctx context.Context, account, gateway, user string, res *loop.Result) error {
	if s.keeper == nil || res.FinishReason != "tool_calls" || len(res.ServerToolCalls) == 0 || len(res.ToolCalls) == 0 {
		return nil
	}
	t := keptTurn{}
	for _, c := range res.ToolCalls {
		t.Client = append(t.Client, c.ID)
	}
	t.Messages = upstream.StoreMessages(res.Turn)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), turnWriteTimeout)
	defer cancel()
	if err := s.keeper.KeepTurn(ctx, account, turnKey(gateway, user, t.Client[0]), t); err != nil {
		return fmt.Errorf("keep turn: %w", err)
	}
	return nil
}

// splice puts the kept turns back into msgs: each assistant message whose
// tool calls are exactly those a kept turn answered with is replaced by
// that turn's messages. msgs is not modified.
func (s *turnStore) splice(ctx context.Context, account, gateway, user string, msgs []upstream.Message) ([]upstream.Message, error) {
	var at []int
	for i, m := range msgs {
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			at = append(at, i)
		}
	}
	if len(at) == 0 || s.keeper == nil {
		return msgs, nil
	}
	turns := make(map[int]*keptTurn)
	for batch := range slices.Chunk(at, turnLookups) {
		keys, vs := make([]string, len(batch)), make([]any, len(batch))
		for j, i := range batch {
			keys[j], vs[j] = turnKey(gateway, user, msgs[i].ToolCalls[0].ID), &keptTurn{}
		}
		found, err := s.keeper.FindTurns(ctx, account, keys, vs)
		if err != nil {
			return nil, err
		}
		for j, i := range batch {
			if t := vs[j].(*keptTurn); found[j] && slices.Equal(t.Client, callIDs(msgs[i].ToolCalls)) {
				turns[i] = t
			}
		}
	}
	if len(turns) == 0 {
		return msgs, nil
	}
	out := make([]upstream.Message, 0, len(msgs)+2*len(turns))
	for i, m := range msgs {
		t, ok := turns[i]
		if !ok {
			out = append(out, m)
			continue
		}
		out = append(out, upstream.LoadMessages(t.Messages)...)
	}
	return out, nil
}

func callIDs(calls []upstream.ToolCall) []string {
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.ID
	}
	return ids
}
