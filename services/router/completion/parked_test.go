package completion

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/router/upstream"
)

// mapKeeper keeps turns in a map, as JSON.
type mapKeeper struct {
	mu    sync.Mutex
	turns map[string][]byte
}

func (m *mapKeeper) KeepTurn(_ context.Context, account, key string, v any) error {
	b, err := json.Marshal(v)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.turns[account+"/"+key] = b
	return err
}

func (m *mapKeeper) FindTurns(_ context.Context, account string, keys []string, vs []any) ([]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	found := make([]bool, len(keys))
	for i, k := range keys {
		if b, ok := m.turns[account+"/"+k]; ok {
			found[i] = json.Unmarshal(b, vs[i]) == nil
		}
	}
	return found, nil
}

// TestParkerResume: a parked call is found for the same call only, pending
// until its result is kept, and a pending call past its deadline (its
// router stopped) is not found, so that it runs anew.
func TestParkerResume(t *testing.T) {
	keeper := &mapKeeper{turns: map[string][]byte{}}
	p := &parker{keeper: keeper, account: "acct", gateway: "g", user: "u"}
	call := upstream.ToolCall{ID: "c1", Name: "shell", Arguments: `{"command":"ls"}`}
	done := make(chan string)
	p.Park(call, done)
	check := func(name string, c upstream.ToolCall, wantRan, wantFound bool) {
		t.Helper()
		_, ran, found, err := p.Resume(t.Context(), c, 0)
		if err != nil || ran != wantRan || found != wantFound {
			t.Errorf("%s: ran %v found %v (%v), want %v %v", name, ran, found, err, wantRan, wantFound)
		}
	}
	check("pending", call, false, true)
	check("changed", upstream.ToolCall{ID: "c1", Name: "shell", Arguments: `{"command":"id"}`}, false, false)
	other := &parker{keeper: keeper, account: "acct", gateway: "g", user: "v"}
	if _, _, found, _ := other.Resume(t.Context(), call, 0); found {
		t.Error("another user's conversation found the call")
	}

	// Its router stopped: the record stays pending past its deadline.
	var v parkedCall
	keeper.mu.Lock()
	_ = json.Unmarshal(keeper.turns["acct/"+p.key(call)], &v)
	v.Until = time.Now().Add(-time.Second)
	keeper.turns["acct/"+p.key(call)], _ = json.Marshal(v)
	keeper.mu.Unlock()
	check("lost", call, false, false)

	done <- `{"stdout":"x"}`
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if result, ran, found, _ := p.Resume(t.Context(), call, 0); ran && found {
			if result != `{"stdout":"x"}` {
				t.Errorf("result %s", result)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the parked result was never kept")
}
