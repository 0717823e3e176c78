package upstream

import (
	"strings"
	"testing"
)

// An upstream's answer is read as encoding/json reads it: conch does not
// control the servers it calls, and a sloppy one must keep working. (A
// client's request is read strictly; see the openai package.)
func TestAnswersAreReadLeniently(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, openAI, anthropic string
		want                    string // the content read
	}{
		{"a member twice: the last wins",
			`{"id": "a", "choices": [{"message": {"content": "first", "content": "last"}}]}`,
			`{"id": "a", "content": [{"type": "text", "text": "first", "text": "last"}]}`,
			"last"},
		{"a name in another case",
			`{"id": "a", "Choices": [{"Message": {"Content": "last"}}]}`,
			`{"id": "a", "Content": [{"Type": "text", "Text": "last"}]}`,
			"last"},
		{"invalid UTF-8 becomes U+FFFD",
			"{\"id\": \"a\", \"choices\": [{\"message\": {\"content\": \"l\xffast\"}}]}",
			"{\"id\": \"a\", \"content\": [{\"type\": \"text\", \"text\": \"l\xffast\"}]}",
			"l\uFFFDast"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for api, decode := range map[string]func() (*Response, error){
				"openai":    func() (*Response, error) { return decodeOpenAI(strings.NewReader(tt.openAI)) },
				"anthropic": func() (*Response, error) { return decodeAnthropic(strings.NewReader(tt.anthropic)) },
			} {
				resp, err := decode()
				if err != nil || resp.Content != tt.want {
					t.Errorf("%s: %+v, %v; want content %q", api, resp, err, tt.want)
				}
			}
		})
	}
}

// BenchmarkDecodeOpenAI reads a chat completion without tools, as each
// completion does with its upstream's answer.
func BenchmarkDecodeOpenAI(b *testing.B) {
	answer := `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeOpenAI(strings.NewReader(answer)); err != nil {
			b.Fatal(err)
		}
	}
}
