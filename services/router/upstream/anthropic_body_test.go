package upstream

import (
	"encoding/json"
	"testing"
)

// TestAnthropicBodyImages: a user message's image parts reach an Anthropic
// upstream as image blocks, in order with its text; a message without
// parts is its text.
func TestAnthropicBodyImages(t *testing.T) {
	raw := `{"role":"user","content":[{"type":"text","text":"what is"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},` +
		`{"type":"image_url","image_url":{"url":"https://x.example/a.png"}},{"type":"image_url","image_url":{"url":"ftp://x.example/a.png"}}]}`
	req := &Request{Model: "m", Messages: []Message{
		{Role: "user", Content: "what is", Raw: json.RawMessage(raw)},
		{Role: "assistant", Content: "a picture"},
		{Role: "user", Content: "thanks"},
	}}
	b, err := (&Anthropic{}).body(req, false)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"user","content":[{"type":"text","text":"what is"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},` +
		`{"type":"image","source":{"type":"url","url":"https://x.example/a.png"}}]},{"role":"assistant","content":[{"type":"text","text":"a picture"}]},{"role":"user","content":[{"type":"text","text":"thanks"}]}]`
	if string(body.Messages) != want {
		t.Errorf("messages\n%s\nwant\n%s", body.Messages, want)
	}
}
