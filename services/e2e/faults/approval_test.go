package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/internal/localcluster"
)

// TestApprovalLeaderKilled kills the approval replica that leads chat
// forwarding while approvals wait for a human: every approval, including
// those asked for and answered while no replica led, is announced once and
// its outcome once; the pending approvals survive, and every command that
// waited runs once it is allowed.
func TestApprovalLeaderKilled(t *testing.T) {
	e := start(t)
	ctx := t.Context()
	hook := newWebhook(t)
	e.gateway("strict", map[string]any{"exec": map[string]any{"security": "allowlist", "ask": "on-miss"}})
	e.must("PUT", "/api/v1/approvals/forwarding", map[string]any{
		"enabled": true, "mode": "targets",
		"targets": []map[string]string{{"channel": "webhook", "to": hook.URL}},
	})

	// Completions whose commands wait for a human.
	var wg sync.WaitGroup
	results := map[string]completion{}
	var mu sync.Mutex
	ask := func(n int) string {
		command := fmt.Sprintf("touch /tmp/approved-%d", n)
		wg.Go(func() {
			c := e.complete(ctx, "strict", "", fmt.Sprintf("leader-%d", n), command)
			mu.Lock()
			results[command] = c
			mu.Unlock()
		})
		return command
	}
	var commands []string
	for n := range 3 {
		commands = append(commands, ask(n))
	}
	ids := waitPending(t, e, commands)
	eventually(t, 30*time.Second, "each approval announced", func() error {
		return hook.announced(slices.Collect(maps.Values(ids)), false)
	})

	leader := notifyLeader(t, e)
	if err := e.c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s, the notifier's leader", leader)

	// While no replica leads (the dead leader's election lease has yet to
	// expire): an approval is answered and two more are asked for.
	first := ids[commands[0]]
	// The router may still send the first call to the replica just
	// killed: it answers 503 (the connection ended mid-call), and a client
	// retries. A retry after a call the dead replica did apply finds the
	// approval answered (409); the state below shows which.
	eventually(t, 30*time.Second, "the first approval answered", func() error {
		r := e.request(t.Context(), "POST", "/api/v1/approvals/"+first+":resolve", map[string]string{"decision": "allow-once"})
		switch {
		case r.ok(), r.err == nil && r.code == http.StatusConflict:
			return nil
		case r.err == nil && r.code == http.StatusServiceUnavailable:
			return fmt.Errorf("resolve: %v", r)
		}
		t.Fatalf("resolve %s = %v", first, r)
		return nil
	})
	later := []string{ask(3), ask(4)}
	for command, id := range waitPending(t, e, later) {
		ids[command] = id
	}
	commands = append(commands, later...)
	eventually(t, 60*time.Second, "another replica leads", func() error {
		if now := notifyLeader(t, e); now == leader {
			return fmt.Errorf("%s still leads", now)
		}
		return nil
	})

	for _, command := range commands[1:] {
		e.must("POST", "/api/v1/approvals/"+ids[command]+":resolve", map[string]string{"decision": "allow-once"})
	}
	wg.Wait()
	for _, command := range commands {
		if c := results[command]; !c.ran() {
			t.Errorf("%q after its approval = %v %+v, want it run", command, c.response, c.result)
		}
	}
	all := slices.Collect(maps.Values(ids))
	eventually(t, 30*time.Second, "every approval and its outcome announced", func() error {
		return hook.announced(all, true)
	})
	// The old leader returns and leads again once the other is killed
	// too: taking over, it sends nothing that was sent already, and
	// announces what is new.
	if err := e.c.Start(ctx, leader); err != nil {
		t.Fatal(err)
	}
	second := notifyLeader(t, e)
	if err := e.c.Kill(second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, leader+" leads again", func() error {
		if now := notifyLeader(t, e); now != leader {
			return fmt.Errorf("%s leads", now)
		}
		return nil
	})
	last := ask(5)
	ids[last] = waitPending(t, e, []string{last})[last]
	e.must("POST", "/api/v1/approvals/"+ids[last]+":resolve", map[string]string{"decision": "allow-once"})
	wg.Wait()
	if c := results[last]; !c.ran() {
		t.Errorf("%q after its approval = %v %+v, want it run", last, c.response, c.result)
	}
	all = slices.Collect(maps.Values(ids))
	eventually(t, 30*time.Second, "the last approval and its outcome announced", func() error {
		return hook.announced(all, true)
	})
	if n := hook.count(); n != 2*len(all) {
		t.Fatalf("the webhook got %d messages for %d approvals, want one notice and one outcome each:\n%s", n, len(all), hook.dump())
	}
}

// waitPending waits until each command has a pending approval and returns
// their ids by command.
func waitPending(t *testing.T, e *env, commands []string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	eventually(t, 30*time.Second, "approvals pending", func() error {
		var list struct {
			Approvals []struct{ ID, Command string } `json:"approvals"`
		}
		if err := json.Unmarshal(e.must("GET", "/api/v1/approvals?state=pending", nil), &list); err != nil {
			return err
		}
		for _, a := range list.Approvals {
			ids[a.Command] = a.ID
		}
		for _, c := range commands {
			if ids[c] == "" {
				return fmt.Errorf("no pending approval for %q", c)
			}
		}
		return nil
	})
	out := map[string]string{}
	for _, c := range commands {
		out[c] = ids[c]
	}
	return out
}

// notifyLeader returns the approval member that leads the notifier
// election: the oldest candidate, named by its address.
func notifyLeader(t *testing.T, e *env) string {
	t.Helper()
	resp, err := e.c.Etcd().Get(t.Context(), approval.KeyPrefix+"leader/notify/", clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	name, ok := e.c.MemberAt(string(resp.Kvs[0].Value))
	if !ok || !strings.HasPrefix(name, localcluster.KindApproval) {
		t.Fatalf("the notifier's leader %q is no approval member", resp.Kvs[0].Value)
	}
	return name
}

// webhook is a chat target that records what it is sent.
type webhook struct {
	*httptest.Server
	mu sync.Mutex
	// notices and outcomes count messages by approval id.
	notices, outcomes map[string]int
	log               []string
}

var outcomeID = regexp.MustCompile(`^Exec approval ([^\s:]+)`)

func newWebhook(t *testing.T) *webhook {
	h := &webhook{notices: map[string]int{}, outcomes: map[string]int{}}
	h.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var msg struct {
			Type     string `json:"type"`
			Text     string `json:"text"`
			Approval struct {
				ID string `json:"id"`
			} `json:"approval"`
		}
		if err := json.Unmarshal(b, &msg); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.log = append(h.log, msg.Type+": "+strings.SplitN(msg.Text, "\n", 2)[0])
		switch m := outcomeID.FindStringSubmatch(msg.Text); {
		case msg.Type == "exec.approval.requested":
			h.notices[msg.Approval.ID]++
		case m != nil:
			h.outcomes[m[1]]++
		}
	}))
	l, err := net.Listen("tcp", hookHost+":0")
	if err != nil {
		t.Fatal(err)
	}
	h.Listener.Close()
	h.Listener = l
	h.Start()
	t.Cleanup(h.Close)
	return h
}

// hookHost is where the tests' webhook receivers listen: a loopback
// address the cluster's operator allows (--outbound-allow), as for an
// internal service; conch's own loopback addresses stay refused.
const hookHost = "127.0.0.2"

// announced checks that each approval of ids was announced exactly once,
// and, with outcomes, that its outcome was too.
func (h *webhook) announced(ids []string, outcomes bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if n := h.notices[id]; n != 1 {
			return fmt.Errorf("approval %s announced %d times; messages:\n%s", id, n, strings.Join(h.log, "\n"))
		}
		if n := h.outcomes[id]; outcomes && n != 1 {
			return fmt.Errorf("outcome of approval %s announced %d times; messages:\n%s", id, n, strings.Join(h.log, "\n"))
		}
	}
	return nil
}

func (h *webhook) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.log)
}

func (h *webhook) dump() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.log, "\n")
}
