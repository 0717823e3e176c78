package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/localcluster"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
)

// TestEtcdMemberLoss kills etcd members: with one of three gone everything
// keeps working, for longer than a registration lease; with two gone
// requests fail at once with an error that says why; once they return,
// everything works again.
func TestEtcdMemberLoss(t *testing.T) {
	e := start(t)
	ctx := t.Context()
	e.gateway("faults", nil)
	etcds := e.c.Members(localcluster.KindEtcd)

	// The leader, so that the survivors must elect another.
	leader, err := e.c.EtcdLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	// Longer than a registration lease (discovery.DefaultTTL), so a lost
	// keepalive would show as a service gone from discovery.
	until := time.Now().Add(discovery.DefaultTTL + 3*time.Second)
	for i := 0; time.Now().Before(until); i++ {
		for _, op := range operations(e, fmt.Sprintf("one-down-%d", i)) {
			if err := op.run(ctx); err != nil {
				t.Fatalf("with %s down, %s: %v", leader, op.name, err)
			}
		}
	}
	assertRegistered(t, e)

	// No quorum: every request answers, and what fails says why.
	var down []string
	for _, name := range etcds {
		if name != leader && len(down) == 0 {
			down = append(down, leader, name)
		}
	}
	if err := e.c.Kill(down[1]); err != nil {
		t.Fatal(err)
	}
	// For longer than the services' leases (discovery's, and the
	// executors' ownership lease), so that they must take new ones once
	// etcd is back.
	failed := 0
	until = time.Now().Add(discovery.DefaultTTL + 6*time.Second)
	for i := 0; i == 0 || time.Now().Before(until); i++ {
		for _, op := range operations(e, fmt.Sprintf("no-quorum-%d", i)) {
			began := time.Now()
			err := op.run(ctx)
			if i == 0 {
				t.Logf("without quorum, %s (%v): %v", op.name, time.Since(began).Round(time.Millisecond), err)
			}
			if err != nil {
				failed++
				if !clearEtcdError(err) {
					t.Errorf("without quorum, %s failed with %v, want an error that says etcd lost its quorum", op.name, err)
				}
			}
		}
	}
	if failed == 0 {
		t.Error("every operation succeeded without an etcd quorum; the test does not test anything")
	}

	// The members return: everything works again.
	for _, name := range down {
		if err := e.c.Start(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "operations after etcd recovered", func() error {
		for _, op := range operations(e, "recovered") {
			if err := op.run(ctx); err != nil {
				return fmt.Errorf("%s: %w", op.name, err)
			}
		}
		return nil
	})
	assertRegistered(t, e)
	for i := range 3 {
		for _, op := range operations(e, fmt.Sprintf("after-%d", i)) {
			if err := op.run(ctx); err != nil {
				t.Fatalf("after etcd recovered, %s: %v", op.name, err)
			}
		}
	}
}

// operation is one thing a client does, failing with what it was told.
type operation struct {
	name string
	run  func(context.Context) error
}

// operations are a few requests that each need etcd: a completion running
// a command in a persistent workspace, a file upload and download, and
// creating an account. tag keeps their names apart.
func operations(e *env, tag string) []operation {
	answer := func(r response) error {
		if r.ok() {
			return nil
		}
		return answerError{r}
	}
	return []operation{
		{"completion", func(ctx context.Context) error {
			c := e.complete(ctx, "faults", "bob", "", "echo "+tag+" > "+tag+".txt && cat "+tag+".txt")
			if !c.ok() {
				return answer(c.response)
			}
			if !c.ran() || c.result.Stdout != tag+"\n" {
				return fmt.Errorf("command: %+v", c.result)
			}
			return nil
		}},
		{"upload and download", func(ctx context.Context) error {
			if err := answer(e.upload(ctx, "bob", "/"+tag+".up", []byte(tag))); err != nil {
				return err
			}
			r := e.download(ctx, "bob", "/"+tag+".up")
			if err := answer(r); err != nil {
				return err
			}
			if string(r.body) != tag {
				return fmt.Errorf("downloaded %q, want %q", r.body, tag)
			}
			return nil
		}},
		{"create account", func(ctx context.Context) error {
			return answer(e.request(ctx, "POST", "/api/v1/accounts", map[string]string{"name": "acct-" + tag}))
		}},
	}
}

// answerError is a request that did not succeed.
type answerError struct{ response }

func (e answerError) Error() string { return e.response.String() }

// clearEtcdError reports an error that tells the client the cluster cannot
// serve now because of its store, rather than a hang, a dropped connection
// or an internal error: a 503 or 504 whose message names etcd's quorum or
// leader, or a command that could not run for that reason.
func clearEtcdError(err error) bool {
	var answer answerError
	if errors.As(err, &answer) && answer.code != http.StatusServiceUnavailable && answer.code != http.StatusGatewayTimeout {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "etcd") && (strings.Contains(msg, "quorum") || strings.Contains(msg, "leader"))
}

// assertRegistered checks that every service process is listed in
// discovery.
func assertRegistered(t *testing.T, e *env) {
	t.Helper()
	for _, kind := range localcluster.ServiceKinds {
		eps, err := discovery.Endpoints(t.Context(), e.c.Etcd(), kind)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range e.c.Members(kind) {
			m, _ := e.c.Member(name)
			if !strings.Contains(strings.Join(eps, " "), m.Addr) {
				t.Errorf("%s (%s) is not in discovery: %v", name, m.Addr, eps)
			}
		}
	}
}
