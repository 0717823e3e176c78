package completion

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/upstream"
)

// A completion that ends on client tool calls after running server tools
// (a "mixed" turn) answers the client with its text and the client calls
// only: the client has no way to carry the shell calls and their results,
// and chat completions are stateless. So that the model sees on the next
// request the conversation as it happened, the turn's own messages (its
// assistant turns with every tool call, and the server tools' results) are
// kept in etcd, keyed by the first client call's id, and put back in place
// of the assistant message the client echoes. Any router replica can do
// it; a turn kept longer than turnTTL is forgotten, and the model then sees
// what the client sent.
const (
	// turnTTL is how long a mixed turn is kept at least for the client's
	// answer (at most an hour more).
	turnTTL = 24 * time.Hour
	// maxTurnBytes bounds a kept turn, compressed.
	maxTurnBytes = 8 << 20
	// turnLookups bounds the reads of one etcd transaction.
	turnLookups = 64
	// turnWriteTimeout bounds keeping a turn after the client may have
	// gone.
	turnWriteTimeout = 10 * time.Second
)

// turnStore keeps mixed turns (see above).
type turnStore struct {
	cli    *clientv3.Client
	leases *etcdx.Leases
}

func newTurnStore(cli *clientv3.Client) *turnStore {
	return &turnStore{cli: cli, leases: etcdx.NewLeases(cli, turnTTL, time.Hour)}
}

// keptTurn is a mixed turn as stored.
type keptTurn struct {
	// Client are the ids of the client tool calls the turn answered with,
	// in order: the assistant message the client echoes must carry exactly
	// these to be replaced.
	Client   []string        `json:"client"`
	Messages []StoredMessage `json:"messages"`
}

// StoredMessage is a conversation's message as conch keeps it in etcd
// (a mixed turn, a stored response): what the upstream is sent, without
// the client's raw JSON.
type StoredMessage struct {
	Role       string       `json:"role"`
	Content    string       `json:"content,omitempty"`
	ToolCalls  []StoredCall `json:"tool_calls,omitempty"`
	ToolCallID string       `json:"tool_call_id,omitempty"`
}

// StoredCall is a tool call of a StoredMessage.
type StoredCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// StoreMessages is msgs as kept.
func StoreMessages(msgs []upstream.Message) []StoredMessage {
	out := make([]StoredMessage, len(msgs))
	for i, m := range msgs {
		out[i] = StoredMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			out[i].ToolCalls = append(out[i].ToolCalls, StoredCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
	}
	return out
}

// LoadMessages is the conversation msgs keeps.
func LoadMessages(msgs []StoredMessage) []upstream.Message {
	out := make([]upstream.Message, len(msgs))
	for i, m := range msgs {
		out[i] = upstream.Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			out[i].ToolCalls = append(out[i].ToolCalls, upstream.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
	}
	return out
}

// turnPrefix is where the turn answered with the client call id lives, for
// one end user of one gateway: an id from another user's conversation
// finds nothing.
func turnPrefix(account, gateway, user, callID string) string {
	return "conch/turns/" + url.PathEscape(account) + "/" + url.PathEscape(gateway) + "/" + url.PathEscape(user) + "/" + url.PathEscape(callID) + "/"
}

// save keeps res's turn when it ended on client tool calls after server
// tools ran. It returns nil without storing when there is nothing to keep.
func (s *turnStore) save(ctx context.Context, account, gateway, user string, res *loop.Result) error {
	if res.FinishReason != "tool_calls" || len(res.ServerToolCalls) == 0 || len(res.ToolCalls) == 0 {
		return nil
	}
	t := keptTurn{}
	for _, c := range res.ToolCalls {
		t.Client = append(t.Client, c.ID)
	}
	t.Messages = StoreMessages(res.Turn)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), turnWriteTimeout)
	defer cancel()
	if err := etcdx.PutBlobLeased(ctx, s.cli, s.leases, turnPrefix(account, gateway, user, t.Client[0]), t, maxTurnBytes); err != nil {
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
	if len(at) == 0 {
		return msgs, nil
	}
	turns := make(map[int]*keptTurn)
	for batch := range slices.Chunk(at, turnLookups) {
		ops := make([]clientv3.Op, len(batch))
		for j, i := range batch {
			ops[j] = etcdx.BlobOp(turnPrefix(account, gateway, user, msgs[i].ToolCalls[0].ID))
		}
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, errs.Wrap(errs.Unavailable, err, "read the conversation's server tool calls")
		}
		for j, i := range batch {
			t := &keptTurn{}
			found, err := etcdx.DecodeBlob(resp.Responses[j].GetResponseRange().Kvs, t)
			if err != nil {
				return nil, err
			}
			if found && slices.Equal(t.Client, callIDs(msgs[i].ToolCalls)) {
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
		out = append(out, LoadMessages(t.Messages)...)
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
