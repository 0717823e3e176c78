package executor

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/conch-sh/conch/services/executor/toolshim"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// TestToolCallsJoinTheCommandsTrace checks that a tool called from a
// command runs under the trace of the call that started the command, and
// that a trace context the sandbox makes up is not taken.
func TestToolCallsJoinTheCommandsTrace(t *testing.T) {
	var (
		mu    sync.Mutex
		calls = map[string]trace.SpanContext{} // arguments → the call's trace context
	)
	caller := func(ctx context.Context, _, _, tool, arguments string) (string, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[arguments] = trace.SpanContextFromContext(ctx)
		return "ok\n", false, nil
	}
	svc := startService(t, "127.0.0.1:1", etcdxtest.StartForTest(t), WithToolCaller(caller))

	_, id, err := svc.Create(t.Context(), "acme", CreateParams{Tools: []toolshim.Tool{{Name: "lookup", Schema: []byte(`{"type":"object","properties":{"q":{"type":"string"}}}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	exec := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled})
	forged := fmt.Sprintf("00-%s-%s-01", trace.TraceID{9, 9, 9}, trace.SpanID{8, 8, 8})
	cmd := `lookup --q given && TRACEPARENT=` + forged + ` lookup --q forged && TRACEPARENT=garbage lookup --q garbage && echo "$TRACEPARENT"`
	res, err := svc.Exec(trace.ContextWithRemoteSpanContext(t.Context(), exec), "acme", ExecParams{SandboxID: id, Command: cmd, Timeout: 30 * time.Second, MaxOutput: 1000}, discard{})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if want := fmt.Sprintf("00-%s-%s-01", exec.TraceID(), exec.SpanID()); !strings.Contains(res.Stdout, want) {
		t.Errorf("TRACEPARENT in the sandbox = %q, want %s", res.Stdout, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if sc := calls[`{"q":"given"}`]; sc.TraceID() != exec.TraceID() {
		t.Errorf("tool call from the command: trace %v, want %v", sc.TraceID(), exec.TraceID())
	}
	for _, args := range []string{`{"q":"forged"}`, `{"q":"garbage"}`} {
		if sc, ok := calls[args]; !ok || sc.IsValid() {
			t.Errorf("tool call %s: trace context %v (called %v), want none", args, sc, ok)
		}
	}
}
