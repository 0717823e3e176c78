package anthropic

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/router/completion"
	"github.com/conch-sh/conch/services/router/upstream"
)

func TestParseRequestRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, body, field, msg string
	}{
		{"not an object", `[1]`, "", "not a JSON object"},
		{"no model", `{"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "model", "is required"},
		{"no max_tokens", `{"model":"g","messages":[{"role":"user","content":"hi"}]}`, "max_tokens", "is required"},
		{"max_tokens null", `{"model":"g","max_tokens":null,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens", "is required"},
		{"two bad fields name the first", `{"model":1,"max_tokens":"x","messages":[{"role":"user","content":"hi"}]}`, "max_tokens", "must be a number"},
		{"no messages", `{"model":"g","max_tokens":10,"messages":[]}`, "messages", "must not be empty"},
		{"wrong type", `{"model":"g","max_tokens":"10","messages":[{"role":"user","content":"hi"}]}`, "max_tokens", "must be a number, got string"},
		{"unknown field", `{"model":"g","max_tokens":10,"nope":1,"messages":[{"role":"user","content":"hi"}]}`, "nope", "unknown field"},
		{"bad role", `{"model":"g","max_tokens":10,"messages":[{"role":"system","content":"hi"}]}`, "messages[0].role", "must be user or assistant"},
		{"image without source type", `{"model":"g","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, "messages[0].content[0].source.type", "must be base64 or url"},
		{"image of a bad type", `{"model":"g","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"AA=="}}]}]}`, "messages[0].content[0].source.media_type", "must be image/jpeg"},
		{"image not base64", `{"model":"g","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"%%"}}]}]}`, "messages[0].content[0].source.data", "base64"},
		{"image url", `{"model":"g","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"file:///etc/passwd"}}]}]}`, "messages[0].content[0].source.url", "http or https"},
		{"image from the assistant", `{"model":"g","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"image","source":{"type":"url","url":"https://x.example/a.png"}}]}]}`, "messages[0].content[0].type", "is not a content block"},
		{"document", `{"model":"g","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, "messages[0].content[0].type", "not document blocks"},
		{"tool_use from user", `{"model":"g","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`, "messages[0].content[0].type", "is not a content block"},
		{"tool_result without id", `{"model":"g","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, "messages[0].content[0].tool_use_id", "is required"},
		{"other server tool", `{"model":"g","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}}]}]}`, "messages[0].content[0].name", "bash_code_execution and text_editor_code_execution only"},
		{"custom tool reserved", `{"model":"g","max_tokens":10,"tools":[{"name":"shell","input_schema":{}}],"messages":[{"role":"user","content":"hi"}]}`, "tools[0].name", "reserved"},
		{"custom tool twice", `{"model":"g","max_tokens":10,"tools":[{"name":"f","input_schema":{}},{"name":"f","input_schema":{}}],"messages":[{"role":"user","content":"hi"}]}`, "tools[1].name", "defined twice"},
		{"custom tool without schema", `{"model":"g","max_tokens":10,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"hi"}]}`, "tools[0].input_schema", "is required"},
		{"old code execution", `{"model":"g","max_tokens":10,"tools":[{"type":"code_execution_20250522","name":"code_execution"}],"messages":[{"role":"user","content":"hi"}]}`, "tools[0].type", "Python only"},
		{"code execution twice", `{"model":"g","max_tokens":10,"tools":[{"type":"code_execution_20250825","name":"code_execution"},{"type":"code_execution_20260120","name":"code_execution"}],"messages":[{"role":"user","content":"hi"}]}`, "tools[1]", "given twice"},
		{"web search", `{"model":"g","max_tokens":10,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}`, "tools[0].type", "does not serve"},
		{"tool_choice", `{"model":"g","max_tokens":10,"tool_choice":{"type":"some"},"messages":[{"role":"user","content":"hi"}]}`, "tool_choice.type", "must be auto, any, tool or none"},
		{"user id", `{"model":"g","max_tokens":10,"metadata":{"user_id":"a b"},"messages":[{"role":"user","content":"hi"}]}`, "metadata.user_id", "must be 1-128"},
		{"anthropic skill", `{"model":"g","max_tokens":10,"container":{"skills":[{"type":"anthropic","skill_id":"pptx"}]},"messages":[{"role":"user","content":"hi"}]}`, "container.skills[0].type", "upload the skill"},
		{"skill type", `{"model":"g","max_tokens":10,"container":{"skills":[{"type":"other","skill_id":"s"}]},"messages":[{"role":"user","content":"hi"}]}`, "container.skills[0].type", "must be custom"},
		{"skill without id", `{"model":"g","max_tokens":10,"container":{"skills":[{"type":"custom"}]},"messages":[{"role":"user","content":"hi"}]}`, "container.skills[0].skill_id", "is required"},
		{"system blocks", `{"model":"g","max_tokens":10,"system":[{"type":"image"}],"messages":[{"role":"user","content":"hi"}]}`, "system[0].type", "must be text"},
		{"bash result", `{"model":"g","max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"bash_code_execution_tool_result","tool_use_id":"s","content":{"type":"other"}}]}]}`, "messages[0].content[0].content.type", "must be bash_code_execution_result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse([]byte(tc.body), true)
			fe, ok := err.(*completion.FieldError)
			if !ok {
				t.Fatalf("parse: %v, want a field error", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) {
				t.Errorf("error %q at %q, want %q at %q", fe.Msg, fe.Field, tc.msg, tc.field)
			}
		})
	}
}

func TestParseRequestSkills(t *testing.T) {
	r, err := parse([]byte(`{"model":"g","max_tokens":10,"container":{"skills":[{"type":"custom","skill_id":"skill_a"},{"type":"custom","skill_id":"skill_b","version":"2"}]},"messages":[{"role":"user","content":"hi"}]}`), true)
	if err != nil {
		t.Fatal(err)
	}
	want := []completion.SkillRef{{ID: "skill_a", Version: "latest", Field: "container.skills[0]"}, {ID: "skill_b", Version: "2", Field: "container.skills[1]"}}
	if len(r.Skills) != 2 || r.Skills[0] != want[0] || r.Skills[1] != want[1] || r.SkillsField != "container.skills" || r.Container != "" {
		t.Fatalf("skills %+v in %q, container %q", r.Skills, r.SkillsField, r.Container)
	}
}

func TestParseRequestConversation(t *testing.T) {
	body := `{"model":"g","max_tokens":100,"system":[{"type":"text","text":"be brief"}],
	"metadata":{"user_id":"alice"},"container":"sbx-1","stop_sequences":["END"],
	"tool_choice":{"type":"any","disable_parallel_tool_use":true},
	"tools":[{"type":"code_execution_20250825","name":"code_execution"},{"name":"weather","description":"w","input_schema":{"type":"object"}},{"type":"bash_20250124","name":"bash"}],
	"messages":[
	 {"role":"user","content":"run ls"},
	 {"role":"assistant","content":[{"type":"text","text":"Running."},
	  {"type":"server_tool_use","id":"srv1","name":"bash_code_execution","input":{"command":"ls"}},
	  {"type":"bash_code_execution_tool_result","tool_use_id":"srv1","content":{"type":"bash_code_execution_result","stdout":"a\n","stderr":"","return_code":0,"content":[]}},
	  {"type":"thinking","thinking":"hm","signature":"x"},
	  {"type":"tool_use","id":"tu1","name":"weather","input":{"city":"Lisbon"}}]},
	 {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":[{"type":"text","text":"sunny"}]},{"type":"text","text":"thanks"}]}
	]}`
	r, err := parse([]byte(body), true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "g" || r.User != "alice" || r.Container != "sbx-1" || !r.Editor || r.Shell == nil {
		t.Errorf("request %+v", r.Request)
	}
	if string(r.Extra["tool_choice"]) != `"required"` || string(r.Extra["parallel_tool_calls"]) != "false" || string(r.Extra["stop"]) != `["END"]` {
		t.Errorf("extra %s %s %s", r.Extra["tool_choice"], r.Extra["parallel_tool_calls"], r.Extra["stop"])
	}
	if len(r.ClientTools) != 2 || r.ClientTools[1].Name != "bash" || !strings.Contains(string(r.ClientTools[1].Parameters), "restart") {
		t.Errorf("client tools %+v", r.ClientTools)
	}
	var got []string
	for _, m := range r.Messages {
		s := m.Role + ":" + m.Content
		for _, c := range m.ToolCalls {
			s += " call " + c.Name + c.Arguments
		}
		if m.ToolCallID != "" {
			s += " for " + m.ToolCallID
		}
		got = append(got, s)
	}
	want := []string{
		"system:be brief",
		"user:run ls",
		`assistant:Running. call shell{"command":"ls"}`,
		`tool:{"outcome":{"exit_code":0,"type":"exit"},"stderr":"","stdout":"a\n"} for srv1`,
		`assistant: call weather{"city":"Lisbon"}`,
		"tool:sunny for tu1",
		"user:thanks",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("messages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestEditorBlocksRoundTrip: an editor call and its result, rendered as
// Anthropic's blocks and given back in the next request's history, are
// what the model saw.
func TestEditorBlocksRoundTrip(t *testing.T) {
	for _, result := range []string{
		`{"type":"view","content":"a\nb","file_type":"text","start_line":1,"num_lines":2,"total_lines":2}`,
		`{"type":"create","is_file_update":true}`,
		`{"type":"str_replace","old_start":2,"old_lines":1,"new_start":2,"new_lines":2,"lines":["x","y"]}`,
		`{"type":"error","error_code":"file_not_found","error_message":"cannot read a"}`,
	} {
		call := upstream.ToolCall{ID: "srv1", Name: editorTool, Arguments: `{"command":"view","path":"a"}`}
		blocks := []map[string]any{serverCallBlock(call), serverResultBlock(call, result)}
		content, _ := json.Marshal(blocks)
		body := `{"model":"g","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":` + string(content) + `}]}`
		r, err := parse([]byte(body), true)
		if err != nil {
			t.Fatalf("%s: %v", content, err)
		}
		if len(r.Messages) != 3 || r.Messages[1].ToolCalls[0].Name != editorTool || r.Messages[2].Content != result {
			t.Errorf("blocks %s read back as %+v", content, r.Messages)
		}
		if typ := blocks[1]["content"].(map[string]any)["type"].(string); !strings.HasPrefix(typ, "text_editor_code_execution_") {
			t.Errorf("result rendered as %s", typ)
		}
	}
}

// TestImagesGoUpstream: a user message with images is sent in OpenAI's
// shape, its text and images in order.
func TestImagesGoUpstream(t *testing.T) {
	body := `{"model":"g","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"what is "},` +
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"text","text":"and"},` +
		`{"type":"image","source":{"type":"url","url":"https://x.example/a.png"}}]},{"role":"user","content":"plain"}]}`
	r, err := parse([]byte(body), true)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"content":[{"text":"what is ","type":"text"},{"image_url":{"url":"data:image/png;base64,iVBORw0KGgo="},"type":"image_url"},{"text":"and","type":"text"},{"image_url":{"url":"https://x.example/a.png"},"type":"image_url"}],"role":"user"}`
	if string(r.Messages[0].Raw) != want || r.Messages[0].Content != "what is and" {
		t.Errorf("raw %s, content %q", r.Messages[0].Raw, r.Messages[0].Content)
	}
	if r.Messages[1].Raw != nil {
		t.Errorf("a text message has raw %s", r.Messages[1].Raw)
	}
}
