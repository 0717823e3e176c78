package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/localcluster"
)

// TestRollingRestartUnderLoad restarts every service process and etcd
// member, one at a time, while clients run completions and upload and download files
// without pause: no request fails but those in flight on a process being
// stopped, and those fail with an error that says what happened. Every
// acknowledged write is there at the end.
func TestRollingRestartUnderLoad(t *testing.T) {
	e := start(t)
	ctx := t.Context()
	e.gateway("faults", nil)
	const user = "dave"

	var (
		mu      sync.Mutex
		ops     []loadOp
		written = map[string]string{} // acknowledged path → content
	)
	record := func(op loadOp) {
		mu.Lock()
		defer mu.Unlock()
		ops = append(ops, op)
		if op.err == nil && op.path != "" {
			written[op.path] = op.content
		}
	}
	succeeded := func(since time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, op := range ops {
			if op.err == nil && op.began.After(since) {
				n++
			}
		}
		return n
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; loadCtx.Err() == nil; i++ {
				for _, op := range loadOps(e, user, fmt.Sprintf("w%d-%d", w, i)) {
					began := time.Now()
					op.err = op.run(loadCtx)
					op.began, op.ended = began, time.Now()
					if loadCtx.Err() != nil {
						return // stopped, not failed
					}
					record(op)
				}
			}
		})
	}
	defer func() { stopLoad(); wg.Wait() }()

	// Every service process, then every etcd member, one at a time.
	var stops []window
	var order []string
	for _, kind := range append(localcluster.ServiceKinds, localcluster.KindEtcd) {
		order = append(order, e.c.Members(kind)...)
	}
	for _, name := range order {
		before := time.Now()
		eventually(t, 60*time.Second, "load before restarting "+name, func() error {
			if n := succeeded(before); n < 3 {
				return fmt.Errorf("%d requests succeeded", n)
			}
			return nil
		})
		w := window{member: name, began: time.Now()}
		if err := e.c.Stop(name); err != nil {
			t.Fatal(err)
		}
		w.ended = time.Now()
		stops = append(stops, w)
		if err := e.c.Start(ctx, name); err != nil {
			t.Fatal(err)
		}
		t.Logf("restarted %s: stopped in %v, serving again %v later", name, w.ended.Sub(w.began).Round(time.Millisecond), time.Since(w.ended).Round(time.Millisecond))
	}
	after := time.Now()
	eventually(t, 60*time.Second, "load after the restarts", func() error {
		if n := succeeded(after); n < 6 {
			return fmt.Errorf("%d requests succeeded", n)
		}
		return nil
	})
	stopLoad()
	wg.Wait()

	failed := 0
	for _, op := range ops {
		if op.err == nil {
			continue
		}
		failed++
		w, ok := inFlight(op, stops)
		switch {
		case !ok:
			t.Errorf("%s failed while no process was stopping: %v", op.name, op.err)
		case !clearRestartError(op.err):
			t.Errorf("%s, in flight while %s stopped, failed with an unclear error: %v", op.name, w.member, op.err)
		default:
			t.Logf("%s, in flight while %s stopped, failed: %v", op.name, w.member, op.err)
		}
	}
	t.Logf("%d requests, %d failed, over %d restarts", len(ops), failed, len(stops))
	for path, content := range written {
		if r := e.download(ctx, user, path); !r.ok() || !bytes.Equal(r.body, []byte(content)) {
			t.Errorf("acknowledged %s: download = %v", path, r)
		}
	}
}

// loadOp is one request of the load and how it went.
type loadOp struct {
	name string
	run  func(context.Context) error
	// path and content are what the request wrote, kept if it succeeded.
	path, content string
	began, ended  time.Time
	err           error
}

// loadOps are one round of a client's requests: a completion that writes
// a file in the user's workspace, and an upload read back.
func loadOps(e *env, user, tag string) []loadOp {
	content := strings.Repeat(tag+"\n", 100)
	return []loadOp{
		{name: "completion " + tag, path: "/load/" + tag + ".txt", content: tag + "\n", run: func(ctx context.Context) error {
			c := e.complete(ctx, "faults", user, "", "mkdir -p load && echo "+tag+" > load/"+tag+".txt && cat load/"+tag+".txt")
			if !c.ok() {
				return answerError{c.response}
			}
			if !c.ran() || c.result.Stdout != tag+"\n" {
				return fmt.Errorf("command: %s", c.result.Error)
			}
			return nil
		}},
		{name: "upload " + tag, path: "/up/" + tag + ".txt", content: content, run: func(ctx context.Context) error {
			if r := e.upload(ctx, user, "/up/"+tag+".txt", []byte(content)); !r.ok() {
				return answerError{r}
			}
			r := e.download(ctx, user, "/up/"+tag+".txt")
			if !r.ok() {
				return answerError{r}
			}
			if string(r.body) != content {
				return errors.New("downloaded other content than was uploaded")
			}
			return nil
		}},
	}
}

// window is when a member was stopping.
type window struct {
	member       string
	began, ended time.Time
}

// inFlight returns the stop that op overlapped.
func inFlight(op loadOp, stops []window) (window, bool) {
	for _, w := range stops {
		if op.began.Before(w.ended) && op.ended.After(w.began) {
			return w, true
		}
	}
	return window{}, false
}

// clearRestartError reports a failure that says what went away: an
// answer (not a dropped connection) whose message names the service or
// the shutdown, not a bare "internal error".
func clearRestartError(err error) bool {
	var answer answerError
	if errors.As(err, &answer) && answer.err != nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	if strings.Contains(msg, "internal error") {
		return false
	}
	for _, word := range []string{"executor", "workspace", "approval", "router", "unavailable", "shutting down", "draining"} {
		if strings.Contains(msg, word) {
			return true
		}
	}
	return false
}
