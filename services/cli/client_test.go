package cli

import "testing"

func TestAPIError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		want APIError
	}{
		{`{"error":{"type":"not_found_error","code":"not_found","message":"sandbox \"x\" not found","param":null}}`,
			APIError{Status: 400, Type: "not_found_error", Code: "not_found", Message: `sandbox "x" not found`}},
		{`{"error":{"type":"invalid_request_error","code":"invalid_argument","message":"limits.pids: too many","param":"limits.pids"}}`,
			APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_argument", Message: "limits.pids: too many", Param: "limits.pids"}},
		{`{"error":{"message":"model not found","type":"invalid_request_error"}}`,
			APIError{Status: 400, Type: "invalid_request_error", Message: "model not found"}},
		{"plain failure\n", APIError{Status: 400, Message: "plain failure"}},
		{`{"unexpected": true}`, APIError{Status: 400, Message: `{"unexpected": true}`}},
		{"", APIError{Status: 400, Message: "no message"}},
	}
	for _, tt := range tests {
		if got := apiError(400, []byte(tt.body)); *got != tt.want {
			t.Errorf("apiError(%q) = %+v, want %+v", tt.body, *got, tt.want)
		}
	}
}

func TestNewClientChecksFlags(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		ok   bool
	}{
		{"valid", Options{Server: "http://127.0.0.1:8080", APIKey: "k", Output: "text"}, true},
		{"json", Options{Server: "https://conch.example/", APIKey: "k", Output: "json"}, true},
		{"bad output", Options{Server: "http://x", APIKey: "k", Output: "yaml"}, false},
		{"bad server", Options{Server: "127.0.0.1:8080", APIKey: "k", Output: "text"}, false},
		{"no key anywhere", Options{Server: "http://x", Output: "text", DataDir: t.TempDir()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CONCH_API_KEY", "")
			_, err := NewClient(&tt.o)
			if (err == nil) != tt.ok {
				t.Errorf("NewClient(%+v) error = %v, want ok=%v", tt.o, err, tt.ok)
			}
		})
	}
}

func TestSanitize(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"plain\ttext\n", "plain\ttext\n"},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"a\rb", `a\x0db`},
		{"rm -rf /\u202e#txt.exe", `rm -rf /\u202e#txt.exe`},
		{"nul\x00", `nul\x00`},
		{"\u009b2J", `\x9b2J`},
		{"olá ✓", "olá ✓"},
	}
	for _, tt := range tests {
		if got := Sanitize(tt.in); got != tt.want {
			t.Errorf("Sanitize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
