package wirejson

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestStrictAndLenient(t *testing.T) {
	t.Parallel()
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	tests := []struct {
		name, in string
		strict   string // words of Strict's error; "" when it reads want
		want     message
	}{
		{"plain", `{"role": "user", "content": "hi"}`, "", message{"user", "hi"}},
		{"a member twice", `{"role": "user", "role": "system"}`, `duplicate object member name "role"`, message{"system", ""}},
		{"a member twice in a nested object", `{"role": "user", "x": {"a": 1, "a": 2}}`, `duplicate object member name "a"`, message{Role: "user"}},
		{"another case", `{"Role": "user"}`, "", message{}},
		{"invalid UTF-8", "{\"role\": \"us\xffer\"}", "invalid UTF-8", message{Role: "us\uFFFDer"}},
		{"data after the value", `{"role": "user"} x`, "after top-level value", message{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var strict, lenient, v1 message
			err := Strict([]byte(tt.in), &strict)
			switch {
			case tt.strict == "" && (err != nil || strict != tt.want):
				t.Errorf("Strict(%s) = %+v, %v; want %+v", tt.in, strict, err, tt.want)
			case tt.strict != "" && (err == nil || !strings.Contains(err.Error(), tt.strict)):
				t.Errorf("Strict(%s) = %v; want an error saying %q", tt.in, err, tt.strict)
			}
			// Lenient reads what encoding/json reads.
			errLenient, errV1 := Lenient([]byte(tt.in), &lenient), json.Unmarshal([]byte(tt.in), &v1)
			if (errLenient == nil) != (errV1 == nil) || (errV1 == nil && lenient != v1) {
				t.Errorf("Lenient(%s) = %+v, %v; encoding/json read %+v, %v", tt.in, lenient, errLenient, v1, errV1)
			}
		})
	}
}

// answer has the kinds of fields an upstream's answer is read into.
type answer struct {
	ID           string          `json:"id"`
	FinishReason string          `json:"finish_reason"`
	Content      *string         `json:"content"`
	Arguments    json.RawMessage `json:"arguments"`
	Code         any             `json:"code"`
	Tokens       int             `json:"tokens"`
	Choices      []answer        `json:"choices"`
}

// What Strict accepts, encoding/json reads the same; what encoding/json
// accepts, Lenient reads the same.
func FuzzReadersAgree(f *testing.F) {
	for _, s := range []string{`{"a": 1, "b": [true, null, "x"]}`, `{"a": 1, "a": 2}`, `{"A": {"a": "\u00e9"}}`, "\"\xff\"", `1e400`, `[{"x": -0.0}]`, `"\ud800"`,
		`{"id": "a", "Finish_Reason": "stop", "content": null, "arguments": {"x": 1}, "code": [1], "tokens": 3, "choices": [{"ID": "b"}]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var strict, lenient, v1 any
		errV1 := json.Unmarshal([]byte(in), &v1)
		if Strict([]byte(in), &strict) == nil && (errV1 != nil || !reflect.DeepEqual(strict, v1)) {
			t.Fatalf("Strict(%q) read %#v; encoding/json read %#v, %v", in, strict, v1, errV1)
		}
		if errV1 == nil && (Lenient([]byte(in), &lenient) != nil || !reflect.DeepEqual(lenient, v1)) {
			t.Fatalf("encoding/json read %q as %#v; Lenient read %#v", in, v1, lenient)
		}
		// And into a struct, as an upstream's answer is read.
		var structV1, structLenient answer
		if json.Unmarshal([]byte(in), &structV1) == nil && (Lenient([]byte(in), &structLenient) != nil || !reflect.DeepEqual(structLenient, structV1)) {
			t.Fatalf("encoding/json read %q as %#v; Lenient read %#v", in, structV1, structLenient)
		}
	})
}
