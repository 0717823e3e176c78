package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
)

// The RPCs one chat completion with a persistent workspace and an approved
// command makes between the services.
const (
	rpcCreateSandbox  = "conch.executor.v1.ExecutorService/CreateSandbox"
	rpcExec           = "conch.executor.v1.ExecutorService/Exec"
	rpcDestroySandbox = "conch.executor.v1.ExecutorService/DestroySandbox"
	rpcAuthorize      = "conch.approval.v1.ApprovalService/Authorize"
	rpcWatchApproval  = "conch.approval.v1.ApprovalService/WatchApproval"
	rpcHydrate        = "conch.workspace.v1.WorkspaceService/Hydrate"
	rpcFlush          = "conch.workspace.v1.WorkspaceService/Flush"
	rpcCallTool       = "conch.router.v1.ToolHostService/CallTool"
)

// TestTracing runs the four services as their own processes, exporting to
// the test's OTLP collector, and checks that one chat completion — with a
// persistent workspace and a command a human approves — is one trace under
// the client's W3C trace context, connected across all four services.
func TestTracing(t *testing.T) {
	c := startTracedCluster(t)
	d := c.d
	createGateway(t, d, map[string]any{"name": "traced", "upstream": map[string]any{"provider": "scripted"},
		"shell": map[string]any{"enabled": true, "allow_data_persistence": true},
		"exec":  map[string]any{"security": "allowlist", "ask": "on-miss"}})

	traceID, clientSpan := randomHexID(16), randomHexID(8)
	const command = "touch traced.txt"
	done := make(chan completionResult, 1)
	go func() {
		done <- postCompletion(t.Context(), d, traceparent(traceID, clientSpan), map[string]any{
			"model": "traced", "user": "tracer",
			"messages": []map[string]string{{"role": "user", "content": "run: " + command}},
		})
	}()
	approve(t, d, command, done)
	res := <-done
	if res.err != nil || res.code != http.StatusOK || !strings.Contains(res.body, `\"exit_code\":0`) {
		t.Fatalf("completion = %d %s %v, want 200 with the approved command run", res.code, res.body, res.err)
	}
	if code, body := d.call("GET", "/api/v1/shell/io/stat?path=/traced.txt", d.Key, nil, "X-Shell-User-Id", "tracer"); code != http.StatusOK {
		t.Fatalf("stat of the file the command made = %d %s, want it in the persistent workspace", code, body)
	}

	// The router tears the completion's sandbox down after answering; once
	// the executor has exported that span, stopping every process flushes
	// the rest.
	c.col.waitFor(t, 30*time.Second, func(s recordedSpan) bool {
		return s.trace == traceID && s.service == "conch-executor" && s.kind == tracepb.Span_SPAN_KIND_SERVER && s.name == rpcDestroySandbox
	})
	// The executor forwards the command's outcome to the approval service,
	// which writes it to the trail and exports it.
	for deadline := time.Now().Add(30 * time.Second); !slices.ContainsFunc(c.col.logs.all(), func(l recordedLog) bool {
		return l.attrs["conch.audit.kind"] == "outcome" && l.attrs["trace_id"] == traceID
	}); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command's outcome was not exported as a log record in 30s")
		}
	}
	c.stop(t)

	all := c.col.all()
	tree := newSpanTree(all, traceID)
	checkAuditLogs(t, c.col.logs.all(), traceID, command)
	t.Logf("trace %s:\n%s", traceID, tree)
	checkTrace(t, tree, all, traceID, clientSpan)
}

// TestTracingBackgroundFlush checks the work a completion leaves behind: a
// command moved to the background flushes the persistent workspace when it
// ends, after the completion answered. That flush is a trace of its own,
// linked to the Exec that started the command rather than parented by a
// request long finished.
func TestTracingBackgroundFlush(t *testing.T) {
	c := startTracedCluster(t)
	d := c.d
	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		if n == 0 {
			return 200, openAIToolCall("call_bg", "exec", map[string]any{"command": "sleep 0.5 && touch background.txt", "background": true})
		}
		return 200, openAIText("started")
	})
	createGateway(t, d, map[string]any{"name": "background", "upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"},
		"shell": map[string]any{"allow_data_persistence": true}})

	traceID, clientSpan := randomHexID(16), randomHexID(8)
	// A session keeps the sandbox, and so the background command, alive
	// after the completion.
	res := postCompletion(t.Context(), d, traceparent(traceID, clientSpan), map[string]any{
		"model": "background", "user": "tracer",
		"messages": []map[string]string{{"role": "user", "content": "start it"}},
		"tools":    []map[string]string{{"type": "exec"}},
	}, "X-Conch-Session-Id", "traced-session")
	if res.err != nil || res.code != http.StatusOK || !strings.Contains(res.body, `\"status\":\"running\"`) {
		t.Fatalf("completion = %d %s %v, want 200 with the command in the background", res.code, res.body, res.err)
	}
	c.col.waitFor(t, 30*time.Second, func(s recordedSpan) bool {
		return s.service == "conch-workspace" && s.kind == tracepb.Span_SPAN_KIND_SERVER && s.name == rpcFlush
	})
	if code, body := d.call("GET", "/api/v1/shell/io/stat?path=/background.txt", d.Key, nil, "X-Shell-User-Id", "tracer"); code != http.StatusOK {
		t.Fatalf("stat of the file the background command made = %d %s, want it in the persistent workspace", code, body)
	}
	c.stop(t)

	all := c.col.all()
	completion := newSpanTree(all, traceID)
	t.Logf("trace %s:\n%s", traceID, completion)
	var execs []recordedSpan
	for _, s := range completion.spans {
		if served("conch-executor", rpcExec)(s) {
			execs = append(execs, s)
		}
	}
	if len(execs) != 1 {
		t.Fatalf("%d executor Exec spans in the completion's trace, want 1", len(execs))
	}
	link := execs[0].trace + "/" + execs[0].id
	flushes := 0
	for _, s := range all {
		if !served("conch-workspace", rpcFlush)(s) {
			continue
		}
		flushes++
		tree := newSpanTree(all, s.trace)
		t.Logf("trace %s of the background flush:\n%s", s.trace, tree)
		roots := tree.roots()
		if s.trace == traceID || len(roots) != 1 {
			t.Errorf("the background flush is in trace %s with %d roots, want a trace of its own", s.trace, len(roots))
			continue
		}
		if root := roots[0]; root.service != "conch-executor" || !slices.Contains(root.links, link) {
			t.Errorf("the background flush's root %v links %v, want the executor's span linked to the Exec %s", root, root.links, link)
		}
	}
	if flushes != 1 {
		t.Errorf("%d workspace flushes, want the background command's one", flushes)
	}
}

// TestTracingToolFromTheShell checks that a tool moved into the shell and
// called by a command is part of the completion's trace: the router's
// CallTool is served under the executor's Exec of that command.
func TestTracingToolFromTheShell(t *testing.T) {
	c := startTracedCluster(t)
	d := c.d
	hook, _ := startWebhook(t)
	up := newFakeUpstream(t, func(n int, req map[string]any) (int, string) {
		if n == 0 {
			return 200, openAIToolCall("call_tool", "shell", map[string]any{"command": "get-users --filter active | grep -c active"})
		}
		return 200, openAIText("done")
	})
	createGateway(t, d, map[string]any{"name": "tooled", "upstream": map[string]any{"provider": "openai", "base_url": up.URL, "model": "m"},
		"shell": map[string]any{"enabled": true, "tools": map[string]any{"mode": "blacklist", "names": []string{}}},
		"tools": map[string]any{"webhooks": []any{map[string]any{
			"name": "get_users", "url": hook.URL,
			"parameters_schema": `{"type":"object","properties":{"filter":{"type":"string"}},"required":["filter"]}`,
		}}}})

	traceID, clientSpan := randomHexID(16), randomHexID(8)
	res := postCompletion(t.Context(), d, traceparent(traceID, clientSpan), map[string]any{
		"model": "tooled", "messages": []map[string]string{{"role": "user", "content": "count the active users"}},
	})
	if res.err != nil || res.code != http.StatusOK || !strings.Contains(res.body, `\"stdout\":\"2\\n\"`) {
		t.Fatalf("completion = %d %s %v, want 200 with the tool's output counted", res.code, res.body, res.err)
	}
	c.col.waitFor(t, 30*time.Second, func(s recordedSpan) bool {
		return s.trace == traceID && served("conch-executor", rpcDestroySandbox)(s)
	})
	c.stop(t)

	all := c.col.all()
	tree := newSpanTree(all, traceID)
	t.Logf("trace %s:\n%s", traceID, tree)
	calls := 0
	for _, s := range tree.spans {
		if served("conch-router", rpcCallTool)(s) {
			calls++
			if !tree.hasAncestor(s, served("conch-executor", rpcExec)) {
				t.Errorf("CallTool %v is not under the executor's Exec of the command", s)
			}
		}
	}
	if calls != 1 {
		t.Errorf("%d CallTool served in the completion's trace, want 1", calls)
	}
	for _, s := range all {
		if s.trace != traceID && served("conch-router", rpcCallTool)(s) {
			t.Errorf("%v is outside the completion's trace %s", s, traceID)
		}
	}
}

// tracedCluster is the four services, each its own process, exporting
// their spans to the test's collector.
type tracedCluster struct {
	d     *dev
	col   *collector
	procs []*service
}

func startTracedCluster(t *testing.T) *tracedCluster {
	t.Helper()
	c := &tracedCluster{col: startCollector(t)}
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cli := etcdxtest.StartForTest(t)
	const adminKey = "tracing-admin-key-0123456789"
	env := append(cleanOTelEnv(),
		"CONCH_ETCD_ENDPOINTS="+strings.Join(cli.Endpoints(), ","),
		"CONCH_INTERNAL_SECRET=tracing-secret-0123456789",
		"CONCH_ADMIN_KEY="+adminKey,
		"CONCH_OUTBOUND_ALLOW="+modelHost,
		"CONCH_LOG_LEVEL=warn",
		"CONCH_WORKSPACE_DIR="+t.TempDir(),
		"CONCH_RESPONSES_DIR="+t.TempDir(),
		"CONCH_SIGNING_KEYS=k1:tracing-signing-key-0123456789abcdef",
		"CONCH_SECRETS_KEY="+sealtest.KeyText(t),
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+c.col.addr,
		// Export each batch at once rather than every 5s, so the test
		// sees the spans it waits for soon after they end.
		"OTEL_BSP_SCHEDULE_DELAY=100",
		// The audit trail, exported as log records once written.
		"CONCH_AUDIT_DIR="+t.TempDir(),
		"CONCH_AUDIT_FLUSH=200ms",
		"OTEL_BLRP_SCHEDULE_DELAY=100",
	)
	for _, args := range [][]string{{"workspace"}, {"approval"}, {"executor", "--sandbox-pool", "0"}} {
		c.procs = append(c.procs, startService(t, bin, env, args...))
	}
	httpAddr := freeAddr(t)
	c.procs = append(c.procs, startService(t, bin, env, "router", "--http-addr", httpAddr))
	c.d = &dev{t: t, URL: "http://" + httpAddr, Key: adminKey, waited: make(chan error)}
	c.d.waitReady(30 * time.Second)
	return c
}

// stop stops every process, which exports its last spans as it shuts down.
func (c *tracedCluster) stop(t *testing.T) {
	t.Helper()
	for _, p := range c.procs {
		p.signal(t)
	}
	for _, p := range c.procs {
		p.wait(t)
	}
}

// checkAuditLogs checks that the audit trail of the completion reached the
// collector as log records from the approval service, which writes it: the
// verdict that asked, the approval's events and the executor's outcome,
// under the completion's trace, each with its stored line as the body.
func checkAuditLogs(t *testing.T, logs []recordedLog, traceID, command string) {
	t.Helper()
	seen := map[string]bool{}
	for _, l := range logs {
		if l.event != "conch.audit" {
			continue
		}
		var body struct {
			Kind, Event, Command, Hash string
			TraceID                    string `json:"trace_id"`
		}
		if err := json.Unmarshal([]byte(l.body), &body); err != nil {
			t.Fatalf("audit log record body %q: %v", l.body, err)
		}
		if l.service != "conch-approval" || l.attrs["conch.audit.kind"] != body.Kind || l.attrs["conch.audit.hash"] != body.Hash {
			t.Errorf("audit log record from %s, attributes %v, body %s", l.service, l.attrs, l.body)
		}
		// The answer is a call of its own, under the answerer's trace.
		if body.Command == command && (body.TraceID == traceID || body.Event == "resolved") {
			seen[body.Kind+" "+body.Event] = true
		}
	}
	for _, want := range []string{"command ", "approval created", "approval resolved", "outcome "} {
		if !seen[want] {
			t.Errorf("no audit log record %q of the completion; saw %v among %d log records", want, seen, len(logs))
		}
	}
}

func traceparent(traceID, spanID string) string {
	return "00-" + traceID + "-" + spanID + "-01"
}

// checkTrace checks the completion's spans: one tree under the client's
// span, crossing the four services through the expected RPCs, and none of
// those RPCs served outside it.
func checkTrace(t *testing.T, tree *spanTree, all []recordedSpan, traceID, clientSpan string) {
	t.Helper()
	if len(tree.spans) == 0 {
		t.Fatalf("no span of trace %s reached the collector; it got %d spans", traceID, len(all))
	}
	roots := tree.roots()
	if len(roots) != 1 {
		t.Fatalf("trace %s has %d roots %v, want one tree under the client's span", traceID, len(roots), roots)
	}
	root := roots[0]
	if root.service != "conch-router" || root.kind != tracepb.Span_SPAN_KIND_SERVER || root.name != "POST /v1/chat/completions" {
		t.Errorf("root = %v, want the router's server span of POST /v1/chat/completions", root)
	}
	if root.parent != clientSpan {
		t.Errorf("root's parent = %q, want the client's span %s", root.parent, clientSpan)
	}

	services := map[string]bool{}
	for _, s := range tree.spans {
		services[s.service] = true
	}
	for _, name := range []string{"conch-router", "conch-executor", "conch-approval", "conch-workspace"} {
		if !services[name] {
			t.Errorf("no span of service %s in the trace", name)
		}
	}

	// Each hop is a client span in the caller's process whose child is the
	// server span in the callee's, under the span that made the call.
	hops := []struct {
		caller, callee, rpc string
		under               func(recordedSpan) bool
		min                 int
	}{
		{"conch-router", "conch-executor", rpcCreateSandbox, is(root), 1},
		{"conch-router", "conch-executor", rpcExec, is(root), 1},
		{"conch-router", "conch-executor", rpcDestroySandbox, is(root), 1},
		{"conch-executor", "conch-workspace", rpcHydrate, served("conch-executor", rpcCreateSandbox), 1},
		// Asking, then using the approval once a human answered.
		{"conch-executor", "conch-approval", rpcAuthorize, served("conch-executor", rpcExec), 2},
		{"conch-executor", "conch-approval", rpcWatchApproval, served("conch-executor", rpcExec), 1},
		{"conch-executor", "conch-workspace", rpcFlush, served("conch-executor", rpcExec), 1},
	}
	for _, h := range hops {
		n := 0
		for _, s := range tree.spans {
			if s.service != h.callee || s.kind != tracepb.Span_SPAN_KIND_SERVER || s.name != h.rpc {
				continue
			}
			c, ok := tree.byID[s.parent]
			if !ok || c.service != h.caller || c.kind != tracepb.Span_SPAN_KIND_CLIENT || c.name != h.rpc {
				t.Errorf("%s served by %s has parent %v, want %s's client span of it", h.rpc, h.callee, c, h.caller)
				continue
			}
			if !tree.hasAncestor(c, h.under) {
				t.Errorf("%s from %s to %s is not under the span that should make it", h.rpc, h.caller, h.callee)
				continue
			}
			n++
		}
		if n < h.min {
			t.Errorf("%d calls of %s from %s to %s in the trace, want at least %d", n, h.rpc, h.caller, h.callee, h.min)
		}
	}

	// The same RPCs served in another trace are work of the completion that
	// lost its context.
	completionRPCs := map[string]bool{rpcCreateSandbox: true, rpcExec: true, rpcDestroySandbox: true,
		rpcAuthorize: true, rpcWatchApproval: true, rpcHydrate: true, rpcFlush: true}
	for _, s := range all {
		if s.trace != traceID && s.kind == tracepb.Span_SPAN_KIND_SERVER && completionRPCs[s.name] {
			t.Errorf("%v is outside the completion's trace %s", s, traceID)
		}
	}
}

// is matches the span s.
func is(s recordedSpan) func(recordedSpan) bool {
	return func(o recordedSpan) bool { return o.id == s.id }
}

// served matches service's server spans of rpc.
func served(service, rpc string) func(recordedSpan) bool {
	return func(o recordedSpan) bool {
		return o.service == service && o.kind == tracepb.Span_SPAN_KIND_SERVER && o.name == rpc
	}
}

type completionResult struct {
	code int
	body string
	err  error
}

// postCompletion sends a chat completion under the client's traceparent,
// from any goroutine.
func postCompletion(ctx context.Context, d *dev, traceparent string, body any, headers ...string) completionResult {
	b, err := json.Marshal(body)
	if err != nil {
		return completionResult{err: err}
	}
	req, err := http.NewRequestWithContext(ctx, "POST", d.URL+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return completionResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+d.Key)
	req.Header.Set("traceparent", traceparent)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return completionResult{err: err}
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return completionResult{code: resp.StatusCode, body: string(out), err: err}
}

// approve allows command once when it is pending, through the REST API.
func approve(t *testing.T, d *dev, command string, done <-chan completionResult) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := d.call("GET", "/api/v1/approvals?state=pending", d.Key, nil)
		var list struct {
			Approvals []struct{ ID, Command string } `json:"approvals"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatalf("list approvals: %v: %s", err, body)
		}
		for _, a := range list.Approvals {
			if a.Command == command {
				code, body := d.call("POST", "/api/v1/approvals/"+a.ID+":resolve", d.Key, map[string]string{"decision": "allow-once"})
				if code != http.StatusOK || !strings.Contains(string(body), `"state":"allowed"`) {
					t.Fatalf("resolve = %d %s", code, body)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pending approval for %q", command)
		}
		select {
		case res := <-done:
			t.Fatalf("completion ended before its command was approved: %d %s %v", res.code, res.body, res.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// service is one conch service running as its own process.
type service struct {
	name   string
	cmd    *exec.Cmd
	out    *lockedBuffer
	waited chan error
	exited bool // waited has been received from
}

func startService(t *testing.T, bin string, env []string, args ...string) *service {
	t.Helper()
	s := &service{name: args[0], cmd: exec.Command(bin, args...), out: &lockedBuffer{}, waited: make(chan error, 1)}
	s.cmd.Env, s.cmd.Stderr = env, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.waited <- s.cmd.Wait() }()
	t.Cleanup(func() {
		if !s.exited {
			_ = s.cmd.Process.Kill()
			<-s.waited
		}
		if t.Failed() {
			t.Logf("conch %s stderr:\n%s", s.name, tail(s.out.String(), 2000))
		}
	})
	return s
}

func (s *service) signal(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stop conch %s: %v", s.name, err)
	}
}

// wait waits for a signalled process, which exports its last spans as it
// shuts down.
func (s *service) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-s.waited:
		s.exited = true
		if err != nil {
			t.Errorf("conch %s exited with %v", s.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("conch %s still running 30s after SIGTERM", s.name)
	}
}

// cleanOTelEnv is cleanEnv without OpenTelemetry settings, so a developer's
// own collector or service name does not leak into the processes under test.
func cleanOTelEnv() []string {
	var env []string
	for _, kv := range cleanEnv() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

func randomHexID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// recordedSpan is a span as the collector received it.
type recordedSpan struct {
	service, name     string
	kind              tracepb.Span_SpanKind
	trace, id, parent string
	start             uint64   // unix nanoseconds
	links             []string // "trace/span" of each link
}

func (s recordedSpan) String() string {
	return fmt.Sprintf("%s %s %q", s.service, strings.ToLower(strings.TrimPrefix(s.kind.String(), "SPAN_KIND_")), s.name)
}

// collector is an OTLP/gRPC trace receiver keeping every span it is sent.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []recordedSpan
	added chan struct{}
	logs  *logCollector
}

// logCollector receives log records, which conch exports for its audit
// trail.
type logCollector struct {
	collogspb.UnimplementedLogsServiceServer
	mu   sync.Mutex
	recs []recordedLog
}

// recordedLog is an exported log record: the service that sent it, its
// event name, body and string attributes.
type recordedLog struct {
	service, event, body string
	attrs                map[string]string
}

var (
	_ coltracepb.TraceServiceServer = (*collector)(nil)
	_ collogspb.LogsServiceServer   = (*logCollector)(nil)
)

// Export implements collogspb.LogsServiceServer.
func (c *logCollector) Export(_ context.Context, req *collogspb.ExportLogsServiceRequest) (*collogspb.ExportLogsServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rl := range req.GetResourceLogs() {
		var svc string
		for _, kv := range rl.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				svc = kv.GetValue().GetStringValue()
			}
		}
		for _, sl := range rl.GetScopeLogs() {
			for _, l := range sl.GetLogRecords() {
				r := recordedLog{service: svc, event: l.GetEventName(), body: l.GetBody().GetStringValue(), attrs: map[string]string{}}
				for _, kv := range l.GetAttributes() {
					r.attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
				}
				c.recs = append(c.recs, r)
			}
		}
	}
	return &collogspb.ExportLogsServiceResponse{}, nil
}

func (c *logCollector) all() []recordedLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]recordedLog(nil), c.recs...)
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{addr: lis.Addr().String(), added: make(chan struct{}, 1), logs: &logCollector{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	collogspb.RegisterLogsServiceServer(srv, c.logs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return c
}

// Export implements coltracepb.TraceServiceServer.
func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	var got []recordedSpan
	for _, rs := range req.GetResourceSpans() {
		var svc string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				svc = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				var links []string
				for _, l := range s.GetLinks() {
					links = append(links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, recordedSpan{
					service: svc, name: s.GetName(), kind: s.GetKind(),
					trace: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()), parent: hex.EncodeToString(s.GetParentSpanId()),
					start: s.GetStartTimeUnixNano(), links: links,
				})
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.mu.Unlock()
	select {
	case c.added <- struct{}{}:
	default:
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) all() []recordedSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]recordedSpan(nil), c.spans...)
}

// waitFor waits until a span matching ok has been received.
func (c *collector) waitFor(t *testing.T, timeout time.Duration, ok func(recordedSpan) bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		for _, s := range c.all() {
			if ok(s) {
				return
			}
		}
		select {
		case <-c.added:
		case <-deadline.C:
			t.Fatalf("the span awaited did not reach the collector in %v", timeout)
		}
	}
}

// spanTree is the spans of one trace by id.
type spanTree struct {
	spans []recordedSpan
	byID  map[string]recordedSpan
}

func newSpanTree(all []recordedSpan, traceID string) *spanTree {
	t := &spanTree{byID: map[string]recordedSpan{}}
	for _, s := range all {
		if s.trace == traceID {
			t.spans = append(t.spans, s)
			t.byID[s.id] = s
		}
	}
	return t
}

// roots are the spans whose parent is not in the trace.
func (t *spanTree) roots() []recordedSpan {
	var out []recordedSpan
	for _, s := range t.spans {
		if _, ok := t.byID[s.parent]; !ok {
			out = append(out, s)
		}
	}
	return out
}

// hasAncestor reports whether s or one of its ancestors matches ok.
func (t *spanTree) hasAncestor(s recordedSpan, ok func(recordedSpan) bool) bool {
	for seen := 0; seen <= len(t.spans); seen++ {
		if ok(s) {
			return true
		}
		p, found := t.byID[s.parent]
		if !found {
			return false
		}
		s = p
	}
	return false // a cycle
}

// String draws the tree, children in the order they started.
func (t *spanTree) String() string {
	children := map[string][]recordedSpan{}
	for _, s := range t.spans {
		children[s.parent] = append(children[s.parent], s)
	}
	for _, c := range children {
		sort.Slice(c, func(i, j int) bool { return c[i].start < c[j].start })
	}
	var b strings.Builder
	var draw func(s recordedSpan, depth int)
	draw = func(s recordedSpan, depth int) {
		if depth > len(t.spans) {
			return
		}
		fmt.Fprintf(&b, "%s%v\n", strings.Repeat("  ", depth), s)
		for _, c := range children[s.id] {
			draw(c, depth+1)
		}
	}
	roots := t.roots()
	sort.Slice(roots, func(i, j int) bool { return roots[i].start < roots[j].start })
	for _, r := range roots {
		draw(r, 0)
	}
	return b.String()
}
