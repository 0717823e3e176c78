// Package faults is the fault-injection suite: each test runs a whole
// cluster as separate processes on loopback (package localcluster: three
// etcd members, MinIO, two processes of each service) and kills, stops and
// restarts its members while clients use it through the routers' public
// HTTP API.
package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/conchtest"
	"github.com/conch-sh/conch/services/internal/localcluster"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
)

// conchBin is the binary under test.
var conchBin = conchtest.Binary

// requestTimeout bounds one HTTP request of a test. A request that takes
// longer hangs: every failure a test injects must surface as an answer.
const requestTimeout = 60 * time.Second

// env is a running cluster and a client of its routers.
type env struct {
	t    *testing.T
	c    *localcluster.Cluster
	key  string
	lb   *balancer
	http *http.Client
}

// start starts a cluster for the test and stops it when the test ends;
// the members' logs are shown if the test failed.
func start(t *testing.T) *env {
	t.Helper()
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	minio, err := miniotest.Binary()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c, err := localcluster.Start(t.Context(), localcluster.Options{
		Dir: t.TempDir(), Conch: bin, MinIO: minio, UnsafeNoFsync: true,
		ExecutorFlags: []string{"--sandbox-pool", "1"},
		// The tests' webhook receivers listen on hookHost, which the
		// operator allows as for an internal service.
		Env:    []string{"CONCH_OUTBOUND_ALLOW=" + hookHost},
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Logf("cluster up in %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			s := c.State()
			for _, m := range s.Members {
				t.Logf("%s log ends:\n%s", m.Name, c.LogTail(m.Name, 3000))
			}
		}
		c.Close()
	})
	s := c.State()
	lb := &balancer{routers: s.Routers, ready: make([]bool, len(s.Routers))}
	go lb.probe(t.Context())
	return &env{
		t: t, c: c, key: s.AdminKey, lb: lb,
		// A new connection per request: a router that is stopping
		// refuses new connections, which a client can safely retry
		// on another router; a kept-alive connection it closes may
		// already carry a request.
		http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	}
}

// balancer spreads requests over the routers as a load balancer does:
// over those whose /readyz answered 200 when last probed, in turn. A
// router that begins to drain answers 503 and gets no more requests, though
// it still serves those that reach it before the balancer notices.
type balancer struct {
	routers []string
	next    atomic.Uint32

	mu    sync.Mutex
	ready []bool
}

// probeInterval is how often the balancer asks every router /readyz: well
// within the cluster's drain delay.
const probeInterval = 100 * time.Millisecond

// probe asks every router /readyz each probeInterval until ctx ends.
func (b *balancer) probe(ctx context.Context) {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for {
		for i, router := range b.routers {
			ok := false
			if req, err := http.NewRequestWithContext(ctx, "GET", router+"/readyz", nil); err == nil {
				if resp, err := client.Do(req); err == nil {
					ok = resp.StatusCode == http.StatusOK
					_ = resp.Body.Close()
				}
			}
			b.mu.Lock()
			b.ready[i] = ok
			b.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(probeInterval):
		}
	}
}

// order returns the routers for one request to try in turn: the ready ones,
// starting with the next, then the others (when none is ready, a client
// has nothing better to try).
func (b *balancer) order() []string {
	first := int(b.next.Add(1))
	var ready, other []string
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.routers {
		j := (first + i) % len(b.routers)
		if b.ready[j] {
			ready = append(ready, b.routers[j])
		} else {
			other = append(other, b.routers[j])
		}
	}
	return append(ready, other...)
}

// testWriter writes the cluster's own warnings to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// response is an HTTP answer, or err when none came.
type response struct {
	code int
	body []byte
	err  error
}

func (r response) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	return fmt.Sprintf("%d %s", r.code, bytes.TrimSpace(r.body))
}

// ok reports a 200.
func (r response) ok() bool { return r.err == nil && r.code == http.StatusOK }

// request sends a request through a router the balancer picks, or the next
// one when a router refuses the connection (nothing was sent, so nothing
// can have happened). body is sent as it is when it is a []byte, as JSON
// otherwise.
func (e *env) request(ctx context.Context, method, path string, body any, headers ...string) response {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return response{err: err}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var r response
	for _, router := range e.lb.order() {
		r = e.send(ctx, router, method, path, raw, body != nil, headers)
		if !refused(r.err) {
			return r
		}
	}
	return r
}

func (e *env) send(ctx context.Context, router, method, path string, body []byte, hasBody bool, headers []string) response {
	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, router+path, rd)
	if err != nil {
		return response{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{code: resp.StatusCode, body: b, err: err}
}

// refused reports a connection that could not be opened.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// must sends a request that has to succeed.
func (e *env) must(method, path string, body any, headers ...string) []byte {
	e.t.Helper()
	r := e.request(e.t.Context(), method, path, body, headers...)
	if !r.ok() {
		e.t.Fatalf("%s %s = %v", method, path, r)
	}
	return r.body
}

// gateway creates a gateway on the built-in scripted model, whose shell
// keeps each user's workspace; more is merged into its definition.
func (e *env) gateway(name string, more map[string]any) {
	e.t.Helper()
	gw := map[string]any{
		"name":     name,
		"upstream": map[string]any{"provider": "scripted"},
		"shell":    map[string]any{"enabled": true, "allow_data_persistence": true},
	}
	for k, v := range more {
		gw[k] = v
	}
	e.must("POST", "/api/v1/gateways", gw)
}

// completion is the answer to a chat completion that ran one command.
type completion struct {
	response
	// result is the shell tool's result, when the completion answered.
	result conchtest.ShellResult
}

// ran reports a completion whose command ran and exited 0.
func (c completion) ran() bool {
	return c.ok() && c.result.Outcome.Type == "exit" && c.result.Outcome.ExitCode == 0
}

// complete asks gateway to run command for user, in session when it is
// not empty (a session keeps its sandbox across completions).
func (e *env) complete(ctx context.Context, gateway, user, session, command string) completion {
	body := map[string]any{
		"model":    gateway,
		"messages": []map[string]string{{"role": "user", "content": "run: " + command}},
	}
	if user != "" {
		body["user"] = user
	}
	var headers []string
	if session != "" {
		headers = []string{"X-Conch-Session-Id", session}
	}
	c := completion{response: e.request(ctx, "POST", "/v1/chat/completions", body, headers...)}
	if !c.ok() {
		return c
	}
	var out struct {
		Conch struct {
			Calls []struct {
				Result string `json:"result"`
			} `json:"server_tool_calls"`
		} `json:"conch"`
	}
	if err := json.Unmarshal(c.body, &out); err != nil || len(out.Conch.Calls) != 1 {
		c.err = fmt.Errorf("completion without exactly one shell call: %s", c.body)
		return c
	}
	if err := json.Unmarshal([]byte(out.Conch.Calls[0].Result), &c.result); err != nil {
		c.err = fmt.Errorf("shell result: %w: %s", err, out.Conch.Calls[0].Result)
	}
	return c
}

// upload stores content at path in user's workspace.
func (e *env) upload(ctx context.Context, user, path string, content []byte) response {
	return e.request(ctx, "PUT", "/api/v1/shell/io/upload?path="+url.QueryEscape(path), content, "X-Shell-User-Id", user)
}

// uploadStream stores the size bytes body yields at path in user's
// workspace, through the first router of the balancer's that accepts the
// connection.
func (e *env) uploadStream(ctx context.Context, user, path string, body io.Reader, size int64) response {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var r response
	for _, router := range e.lb.order() {
		req, err := http.NewRequestWithContext(ctx, "PUT", router+"/api/v1/shell/io/upload?path="+url.QueryEscape(path), body)
		if err != nil {
			return response{err: err}
		}
		req.Header.Set("Authorization", "Bearer "+e.key)
		req.Header.Set("X-Shell-User-Id", user)
		req.ContentLength = size
		resp, err := e.http.Do(req)
		if err != nil {
			if r = (response{err: err}); refused(err) {
				continue
			}
			return r
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return response{code: resp.StatusCode, body: b, err: err}
	}
	return r
}

// download reads path from user's workspace.
func (e *env) download(ctx context.Context, user, path string) response {
	return e.request(ctx, "GET", "/api/v1/shell/io/download?path="+url.QueryEscape(path), nil, "X-Shell-User-Id", user)
}

// eventually polls check until it returns nil, failing the test with the
// last error after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
