package load

import "testing"

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
