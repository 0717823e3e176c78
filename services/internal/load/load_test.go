package load

import (
	"strings"
	"testing"
	"time"
)

func TestCheckCompletion(t *testing.T) {
	ok := `{"stdout":"x\n","stderr":"","outcome":{"type":"exit","exit_code":0}}`
	failed := `{"stdout":"","stderr":"","outcome":{"type":"exit","exit_code":1}}`
	refused := `{"stdout":"","stderr":"","outcome":{"type":"error"},"error":"Command not allowed by exec policy"}`
	body := func(results ...string) []byte {
		b := `{"conch":{"server_tool_calls":[`
		for i, r := range results {
			if i > 0 {
				b += ","
			}
			b += `{"name":"shell","result":` + quote(r) + `}`
		}
		return []byte(b + `]}}`)
	}
	tests := []struct {
		name     string
		body     []byte
		commands int
		ok       bool
	}{
		{"all ran", body(ok, ok), 2, true},
		{"one failed", body(ok, failed), 2, false},
		{"refused", body(refused), 1, false},
		{"too few", body(ok), 2, false},
		{"not JSON", []byte("{"), 1, false},
		{"result not JSON", body("nope"), 1, false},
	}
	for _, tt := range tests {
		if got := checkCompletion(tt.body, tt.commands); (got == "") != tt.ok {
			t.Errorf("%s: checkCompletion = %q, want ok=%v", tt.name, got, tt.ok)
		}
	}
}

func quote(s string) string {
	out := `"`
	for _, r := range s {
		switch r {
		case '"', '\\':
			out += `\` + string(r)
		case '\n':
			out += `\n`
		default:
			out += string(r)
		}
	}
	return out + `"`
}

func TestMixCoversEveryKind(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		seen[pick().name] = true
	}
	for _, k := range mix {
		if !seen[k.name] {
			t.Errorf("kind %s never picked", k.name)
		}
	}
}

// TestAccount charges each kind's CPU over a phase to its completions,
// and says what the machine was like.
func TestAccount(t *testing.T) {
	m0, err := readMachine()
	if err != nil {
		t.Fatal(err)
	}
	readings := []map[string]time.Duration{
		{"router": time.Second, "sandboxes": 2 * time.Second},
		{"router": 3 * time.Second, "sandboxes": 6 * time.Second, "etcd": 500 * time.Millisecond},
	}
	cpu := func() (map[string]time.Duration, error) {
		r := readings[0]
		readings = readings[1:]
		return r, nil
	}
	c0, _ := cpu()
	r := Result{Completions: 10}
	if err := r.account(m0, c0, cpu); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{"router": 200, "sandboxes": 400, "etcd": 50} {
		if got := r.CPUPerCompletion[k]; got != want {
			t.Errorf("%s: %v ms per completion, want %v", k, got, want)
		}
	}
	for _, k := range []string{"load client", "other"} {
		if v, ok := r.CPUPerCompletion[k]; !ok || v < 0 {
			t.Errorf("%s: %v, %v", k, v, ok)
		}
	}
	if r.Cores < 1 || r.Busy < 0 || r.Busy > 1 {
		t.Errorf("machine: %d cores, %v busy", r.Cores, r.Busy)
	}
	var b strings.Builder
	r.Phase, r.Concurrency, r.PerSecond = "sustained", 8, 2
	Print(&b, Report{Phases: []Result{r}, Floor: &FloorResult{Concurrency: 8, PerSecond: 4}})
	if !strings.Contains(b.String(), "CPU ms per completion: ") || !strings.Contains(b.String(), "sandboxes 400.0") || !strings.Contains(b.String(), "sustained: 0.50 of the floor's") {
		t.Errorf("the report says:\n%s", b.String())
	}
}

func TestRetryAfter(t *testing.T) {
	for v, want := range map[string]time.Duration{"2": 2 * time.Second, " 0 ": 0, "600": maxRetryWait, "soon": time.Second, "-1": time.Second, "": time.Second} {
		if got := retryAfter(v); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}
