package completion

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
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
	// turnTTL is how long a mixed turn is kept for the client's answer.
	turnTTL = 24 * time.Hour
	// turnChunk is the size of one etcd value of a kept turn, well under
	// etcd's request limit.
	turnChunk = 512 << 10
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
	cli *clientv3.Client
}

// keptTurn is a mixed turn as stored.
type keptTurn struct {
	// Client are the ids of the client tool calls the turn answered with,
	// in order: the assistant message the client echoes must carry exactly
	// these to be replaced.
	Client   []string      `json:"client"`
	Messages []keptMessage `json:"messages"`
}

type keptMessage struct {
	Role       string     `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []keptCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type keptCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
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
	for _, m := range res.Turn {
		km := keptMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			km.ToolCalls = append(km.ToolCalls, keptCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
		}
		t.Messages = append(t.Messages, km)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(t); err != nil {
		return errs.Wrap(errs.Internal, err, "encode turn")
	}
	if err := zw.Close(); err != nil {
		return errs.Wrap(errs.Internal, err, "encode turn")
	}
	if buf.Len() > maxTurnBytes {
		return errs.New(errs.ResourceExhausted, "turn is %d bytes compressed, more than the %d kept", buf.Len(), maxTurnBytes)
	}

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), turnWriteTimeout)
	defer cancel()
	lease, err := s.cli.Grant(ctx, int64(turnTTL/time.Second))
	if err != nil {
		return errs.Wrap(errs.Unavailable, err, "keep turn")
	}
	prefix := turnPrefix(account, gateway, user, t.Client[0])
	data := buf.Bytes()
	n := 0
	for off := 0; off < len(data); off += turnChunk {
		chunk := data[off:min(off+turnChunk, len(data))]
		if _, err := s.cli.Put(ctx, prefix+fmt.Sprintf("%03d", n), string(chunk), clientv3.WithLease(lease.ID)); err != nil {
			return errs.Wrap(errs.Unavailable, err, "keep turn")
		}
		n++
	}
	// The head goes last: a reader that sees it sees every chunk.
	if _, err := s.cli.Put(ctx, prefix+"head", strconv.Itoa(n), clientv3.WithLease(lease.ID)); err != nil {
		return errs.Wrap(errs.Unavailable, err, "keep turn")
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
			ops[j] = clientv3.OpGet(turnPrefix(account, gateway, user, msgs[i].ToolCalls[0].ID), clientv3.WithPrefix())
		}
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, errs.Wrap(errs.Unavailable, err, "read the conversation's server tool calls")
		}
		for j, i := range batch {
			t, err := decodeTurn(resp.Responses[j].GetResponseRange().Kvs)
			if err != nil {
				return nil, err
			}
			if t != nil && slices.Equal(t.Client, callIDs(msgs[i].ToolCalls)) {
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
		for _, km := range t.Messages {
			um := upstream.Message{Role: km.Role, Content: km.Content, ToolCallID: km.ToolCallID}
			for _, c := range km.ToolCalls {
				um.ToolCalls = append(um.ToolCalls, upstream.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
			out = append(out, um)
		}
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

// decodeTurn reads a kept turn from its keys, sorted; nil when there is
// none, or it is not complete yet.
func decodeTurn(kvs []*mvccpb.KeyValue) (*keptTurn, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	head := kvs[len(kvs)-1]
	n, err := strconv.Atoi(string(head.Value))
	if !bytes.HasSuffix(head.Key, []byte("/head")) || err != nil || n != len(kvs)-1 {
		return nil, nil
	}
	var data []byte
	for _, kv := range kvs[:n] {
		data = append(data, kv.Value...)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, errs.Wrap(errs.Internal, err, "decode turn")
	}
	var t keptTurn
	if err := json.NewDecoder(io.LimitReader(zr, 16*maxTurnBytes)).Decode(&t); err != nil {
		return nil, errs.Wrap(errs.Internal, err, "decode turn")
	}
	return &t, nil
}
