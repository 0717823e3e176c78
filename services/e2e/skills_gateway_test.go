package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// TestGatewaySkills: a gateway's shell.skills are mounted in every sandbox
// its shell creates, and the model is told of them, without the request
// naming any; a skill the gateway names that is gone is an error naming
// the gateway, not a sandbox without it.
func TestGatewaySkills(t *testing.T) {
	d := startDev(t)
	skill := "---\nname: greet\ndescription: Greets people the house way.\n---\nSay hello from-gateway-skill.\n"
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, err := mw.CreateFormFile("files", "greet/SKILL.md")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(fw, skill)
	_ = mw.Close()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", d.URL+"/v1/skills", &body)
	req.Header.Set("Authorization", "Bearer "+d.Key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var created struct{ ID string }
	if resp.StatusCode != 200 || json.Unmarshal(out, &created) != nil || created.ID == "" {
		t.Fatalf("upload: %d %s", resp.StatusCode, out)
	}

	createGateway(t, d, map[string]any{"name": "skilled", "upstream": map[string]any{"provider": "scripted"},
		"shell": map[string]any{"enabled": true, "skills": []any{map[string]any{"skill_id": created.ID}}}})
	c := anthropic.NewClient(option.WithBaseURL(d.URL), option.WithAPIKey(d.Key), option.WithMaxRetries(0))
	msg, err := c.Messages.New(t.Context(), anthropic.MessageNewParams{
		Model: "skilled", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("run: cat /mnt/skills/greet/SKILL.md"))},
	})
	if err != nil {
		t.Fatal(err)
	}
	var stdout string
	for _, b := range msg.Content {
		if b.Type == "bash_code_execution_tool_result" {
			stdout = b.AsBashCodeExecutionToolResult().Content.Stdout
		}
	}
	if stdout != skill || len(msg.Container.Skills) != 1 || msg.Container.Skills[0].SkillID != created.ID {
		t.Errorf("stdout %q, container skills %+v", stdout, msg.Container.Skills)
	}

	if code, body := d.call("DELETE", "/v1/skills/"+created.ID, d.Key, nil); code != 200 {
		t.Fatalf("delete skill: %d %s", code, body)
	}
	_, err = c.Messages.New(t.Context(), anthropic.MessageNewParams{
		Model: "skilled", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("run: ls /mnt/skills"))},
	})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Error(), `gateway \"skilled\" mounts a skill it cannot`) {
		t.Errorf("a gone skill: %v", err)
	}
}
