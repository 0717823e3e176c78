package completion

import (
	"crypto/rand"
	"encoding/base64"
	"reflect"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/responsestore"
	"github.com/conch-sh/conch/services/router/upstream"
)

// mixedTurn is a completion that ran a shell call and ended on a client
// call in the same model turn, after an earlier turn of shell only.
func mixedTurn(output string) *loop.Result {
	shell1 := upstream.ToolCall{ID: "call_s1", Name: "shell", Arguments: `{"command":"ls"}`}
	shell2 := upstream.ToolCall{ID: "call_s2", Name: "shell", Arguments: `{"command":"date"}`}
	client := upstream.ToolCall{ID: "call_c1", Name: "get_weather", Arguments: `{"city":"Lisbon"}`}
	return &loop.Result{
		Content:         "Looking.\n\nNow the weather.",
		ToolCalls:       []upstream.ToolCall{client},
		FinishReason:    "tool_calls",
		ServerToolCalls: []loop.ServerToolCall{{ID: "call_s1"}, {ID: "call_s2"}},
		Turn: []upstream.Message{
			{Role: "assistant", Content: "Looking.", ToolCalls: []upstream.ToolCall{shell1}},
			{Role: "tool", ToolCallID: "call_s1", Content: output},
			{Role: "assistant", Content: "Now the weather.", ToolCalls: []upstream.ToolCall{shell2, client}},
			{Role: "tool", ToolCallID: "call_s2", Content: `{"stdout":"Tue"}`},
		},
	}
}

func TestTurnsSplice(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	// Two stores over one etcd and one object store stand for two router
	// replicas.
	objects := objectStore(t)
	saver, reader := &turnStore{keeper: keeper(t, cli, objects)}, &turnStore{keeper: keeper(t, cli, objects)}

	big := make([]byte, 3<<20) // incompressible
	_, _ = rand.Read(big)
	bigOutput := base64.StdEncoding.EncodeToString(big)
	for _, output := range []string{`{"stdout":"a.txt"}`, bigOutput} {
		res := mixedTurn(output)
		user := "alice-" + output[:4]
		if err := saver.save(ctx, "acct", "gw", user, res); err != nil {
			t.Fatal(err)
		}
		echoed := []upstream.Message{
			{Role: "user", Content: "weather?"},
			{Role: "assistant", Content: res.Content, ToolCalls: res.ToolCalls},
			{Role: "tool", ToolCallID: "call_c1", Content: "sunny"},
		}
		want := append(append([]upstream.Message{echoed[0]}, res.Turn...), echoed[2])

		tests := []struct {
			name                   string
			account, gateway, user string
			msgs                   []upstream.Message
			want                   []upstream.Message
		}{
			{"the echoed message is replaced by the turn", "acct", "gw", user, echoed, want},
			{"another user", "acct", "gw", "bob", echoed, echoed},
			{"another gateway", "acct", "other", user, echoed, echoed},
			{"another account", "other", "gw", user, echoed, echoed},
			{"calls differ", "acct", "gw", user, []upstream.Message{
				{Role: "assistant", ToolCalls: []upstream.ToolCall{res.ToolCalls[0], {ID: "call_x", Name: "f"}}},
			}, []upstream.Message{
				{Role: "assistant", ToolCalls: []upstream.ToolCall{res.ToolCalls[0], {ID: "call_x", Name: "f"}}},
			}},
			{"no tool calls", "acct", "gw", user, echoed[:1], echoed[:1]},
		}
		for _, tc := range tests {
			got, err := reader.splice(ctx, tc.account, tc.gateway, tc.user, tc.msgs)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s (output of %d bytes): got %d messages %+v, want %d", tc.name, len(output), len(got), got[:min(len(got), 3)], len(tc.want))
			}
		}
	}
}

func TestTurnsSaveOnlyMixedTurns(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	objects := objectStore(t)
	s := &turnStore{keeper: keeper(t, cli, objects)}
	for name, res := range map[string]*loop.Result{
		"final answer":      {FinishReason: "stop", Content: "done", ServerToolCalls: []loop.ServerToolCall{{ID: "call_s1"}}},
		"client calls only": {FinishReason: "tool_calls", ToolCalls: []upstream.ToolCall{{ID: "call_c1", Name: "f"}}},
	} {
		if err := s.save(t.Context(), "acct", "gw", "", res); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	resp, err := cli.Get(t.Context(), "conch/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("kept %d keys for turns without server and client calls both", resp.Count)
	}
	for info := range objects.List(t.Context(), "", true) {
		t.Fatalf("kept %s for turns without server and client calls both", info.Key)
	}
}

func objectStore(t *testing.T) store.Store {
	st, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func keeper(t *testing.T, cli *clientv3.Client, objects store.Store) *responsestore.Store {
	s, err := responsestore.New(responsestore.Options{Etcd: cli, Objects: objects})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
