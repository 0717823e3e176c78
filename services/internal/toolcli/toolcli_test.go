package toolcli

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const schema = `{
  "type": "object",
  "properties": {
    "filter": {"type": "string", "description": "which users", "enum": ["active", "inactive"]},
    "format": {"type": "string", "default": "json"},
    "max_results": {"type": "integer", "minimum": 1, "maximum": 100},
    "ratio": {"type": "number", "exclusiveMinimum": 0},
    "verbose": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "ids": {"type": "array", "items": {"type": "integer"}},
    "options": {"type": "object"}
  },
  "required": ["filter"]
}`

func TestParse(t *testing.T) {
	t.Parallel()
	c, err := New("get_users", "List users.", []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		want    map[string]any
		wantErr string
	}{
		{"flags with space", []string{"--filter", "active", "--format", "csv"}, map[string]any{"filter": "active", "format": "csv"}, ""},
		{"flags with =", []string{"--filter=active", "--max-results=10"}, map[string]any{"filter": "active", "max_results": int64(10)}, ""},
		{"underscore spelling", []string{"--filter", "active", "--max_results", "5"}, map[string]any{"filter": "active", "max_results": int64(5)}, ""},
		{"boolean forms", []string{"--filter", "active", "--verbose"}, map[string]any{"filter": "active", "verbose": true}, ""},
		{"boolean false", []string{"--filter", "active", "--verbose=false"}, map[string]any{"filter": "active", "verbose": false}, ""},
		{"repeated array", []string{"--filter", "active", "--tags", "a", "--tags", "b", "--ids", "1", "--ids=2"}, map[string]any{"filter": "active", "tags": []any{"a", "b"}, "ids": []any{int64(1), int64(2)}}, ""},
		{"object as json", []string{"--filter", "active", "--options", `{"deep":true}`}, map[string]any{"filter": "active", "options": map[string]any{"deep": true}}, ""},
		{"raw json", []string{"--json", `{"filter":"inactive","max_results":3}`}, map[string]any{"filter": "inactive", "max_results": float64(3)}, ""},
		{"missing required", []string{"--format", "csv"}, nil, "missing required flag --filter"},
		{"unknown flag", []string{"--filter", "active", "--colour", "red"}, nil, "unknown flag --colour"},
		{"bad enum", []string{"--filter", "everyone"}, nil, "not one of active, inactive"},
		{"not an integer", []string{"--filter", "active", "--max-results", "ten"}, nil, "not an integer"},
		{"below minimum", []string{"--filter", "active", "--max-results", "0"}, nil, "below the minimum"},
		{"above maximum", []string{"--filter", "active", "--max-results", "101"}, nil, "above the maximum"},
		{"exclusive minimum", []string{"--filter", "active", "--ratio", "0"}, nil, "below the minimum"},
		{"not a number", []string{"--filter", "active", "--ratio", "NaN"}, nil, "not a number"},
		{"bad boolean", []string{"--filter", "active", "--verbose=maybe"}, nil, "not true or false"},
		{"bad object", []string{"--filter", "active", "--options", "{"}, nil, "not valid JSON"},
		{"missing value", []string{"--filter"}, nil, "needs a value"},
		{"positional", []string{"active"}, nil, "unexpected argument"},
		{"twice", []string{"--filter", "active", "--filter", "inactive"}, nil, "given twice"},
		{"json with flags", []string{"--filter", "active", "--json", "{}"}, nil, "cannot be combined"},
		{"json violating schema", []string{"--json", `{"filter":"x"}`}, nil, "invalid arguments"},
		{"json not object", []string{"--json", `[1]`}, nil, "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := c.Parse(tt.args)
			if tt.wantErr != "" {
				var ue *UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) = %v, want a usage error containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.args, diff)
			}
		})
	}
	if _, err := c.Parse([]string{"--help"}); !errors.Is(err, ErrHelp) {
		t.Errorf("--help = %v, want ErrHelp", err)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	c, err := New("get_users", "List users.", []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	help := c.Help()
	for _, want := range []string{
		"usage: get_users [flags]", "List users.",
		"--filter string", "which users (required; one of: active, inactive)",
		"--format string", "default: json",
		"--max-results integer", "minimum: 1; maximum: 100",
		"--verbose\n", "--tags string (repeat for more)", "--options JSON", "--json JSON",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
}

func TestNewRejectsBadSchema(t *testing.T) {
	t.Parallel()
	for _, s := range []string{`{`, `{"properties": {"a": 5}}`, `{"type": "object", "minProperties": "x"}`} {
		if _, err := New("t", "", []byte(s)); err == nil {
			t.Errorf("New(%s) = nil error", s)
		}
	}
}
