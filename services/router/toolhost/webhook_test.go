package toolhost

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// An answer longer than the limit is cut between characters, never inside
// one, and says it was cut; an error answer's excerpt is cut the same way.
func TestReadAnswerCutsCharacters(t *testing.T) {
	answer := func(status int, body string) *http.Response {
		return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body))}
	}
	long := strings.Repeat("€", maxOutput+10) // three bytes each
	out, err := readAnswer(answer(200, long), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(out) || !strings.HasSuffix(out, "\n[output truncated]") ||
		utf8.RuneCountInString(strings.TrimSuffix(out, "\n[output truncated]")) != maxOutput {
		t.Errorf("cut answer: %d runes, valid %v, ends %q", utf8.RuneCountInString(out), utf8.ValidString(out), out[len(out)-20:])
	}
	if out, err := readAnswer(answer(200, "short ü"), nil); err != nil || out != "short ü" {
		t.Errorf("short answer: %q %v", out, err)
	}
	_, err = readAnswer(answer(500, strings.Repeat("€", 3000)), nil)
	if err == nil || !utf8.ValidString(err.Error()) || !strings.HasSuffix(err.Error(), "…") {
		t.Errorf("error answer: %v", err)
	}
}
