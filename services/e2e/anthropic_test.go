package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// anthropicScript drives conch dev with Anthropic's official TypeScript
// SDK, changed only in its base URL and key: the code execution tool run
// in conch's sandbox, the same container used again by a second request,
// a streamed message, and the SDK's own error classes for conch's errors.
// It prints what it saw as JSON.
const anthropicScript = `
const Anthropic = require(process.env.ANTHROPIC_SDK);
const client = new Anthropic({ baseURL: process.env.CONCH_URL, apiKey: process.env.CONCH_API_KEY, maxRetries: 0 });
const tools = [{ type: "code_execution_20250825", name: "code_execution" }];
(async () => {
  const seen = {};
  const first = await client.messages.create({ model: "default", max_tokens: 512, tools,
    messages: [{ role: "user", content: "run: echo from-anthropic > note.txt && cat note.txt" }] });
  seen.types = first.content.map((b) => b.type);
  seen.call = first.content.find((b) => b.type === "server_tool_use");
  seen.result = first.content.find((b) => b.type === "bash_code_execution_tool_result");
  seen.stop = first.stop_reason;
  seen.usage = first.usage;
  seen.container = first.container;

  const again = await client.messages.create({ model: "default", max_tokens: 512, tools, container: first.container.id,
    messages: [{ role: "user", content: "run: cat note.txt" }] });
  seen.again = again.content.find((b) => b.type === "bash_code_execution_tool_result").content.stdout;
  seen.sameContainer = again.container.id === first.container.id;

  // The conversation given back, server tool blocks and all, goes on.
  const next = await client.messages.create({ model: "default", max_tokens: 512, tools, container: first.container.id,
    messages: [{ role: "user", content: "run: echo from-anthropic" }, { role: "assistant", content: first.content }, { role: "user", content: "thanks" }] });
  seen.next = next.content.map((b) => b.type).join(",");

  const stream = client.messages.stream({ model: "default", max_tokens: 512, tools,
    messages: [{ role: "user", content: "run: echo streamed-anthropic" }] });
  seen.events = [];
  stream.on("streamEvent", (ev) => seen.events.push(ev.type));
  const final = await stream.finalMessage();
  seen.streamedTypes = final.content.map((b) => b.type);
  seen.streamedStdout = final.content.find((b) => b.type === "bash_code_execution_tool_result").content.stdout;
  seen.streamedCommand = final.content.find((b) => b.type === "server_tool_use").input.command;
  seen.streamedContainer = final.container && final.container.id;

  const errs = {};
  try { await client.messages.create({ model: "no-such-gateway", max_tokens: 10, messages: [{ role: "user", content: "hi" }] }); }
  catch (e) { errs.notFound = [e.constructor.name, e.status, e.error && e.error.error && e.error.error.type]; }
  try { await client.messages.create({ model: "default", max_tokens: 10, messages: [{ role: "system", content: "hi" }] }); }
  catch (e) { errs.bad = [e.constructor.name, e.status, e.error && e.error.error && e.error.error.message]; }
  try { await new Anthropic({ baseURL: process.env.CONCH_URL, apiKey: "sk-wrong", maxRetries: 0 }).messages.create({ model: "default", max_tokens: 10, messages: [{ role: "user", content: "hi" }] }); }
  catch (e) { errs.auth = [e.constructor.name, e.status]; }
  try { await client.messages.create({ model: "default", max_tokens: 10, container: "sbx-not-there", tools, messages: [{ role: "user", content: "run: ls" }] }); }
  catch (e) { errs.container = [e.constructor.name, e.status]; }
  seen.errors = errs;
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  seen.models = models;
  seen.model = (await client.models.retrieve("default")).type;
  console.log(JSON.stringify(seen));
})().catch((e) => { console.error(e); process.exit(1); });
`

// TestAnthropicSDK: Anthropic's TypeScript SDK works against conch dev
// unchanged but for its base URL and key.
func TestAnthropicSDK(t *testing.T) {
	modules := nodeModules(t)
	d := startDev(t)
	script := filepath.Join(t.TempDir(), "anthropic.cjs")
	if err := os.WriteFile(script, []byte(anthropicScript), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "node", script)
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key,
		"ANTHROPIC_SDK="+filepath.Join(modules, "@anthropic-ai", "sdk"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var seen struct {
		Types, StreamedTypes, Events []string
		Call                         struct {
			Name  string
			Input struct{ Command string }
		}
		Result struct {
			Content struct {
				Type       string
				Stdout     string
				ReturnCode *int `json:"return_code"`
			}
		}
		Stop  string
		Usage struct {
			InputTokens   int `json:"input_tokens"`
			ServerToolUse struct {
				CodeExecutionRequests int `json:"code_execution_requests"`
			} `json:"server_tool_use"`
		}
		Container struct {
			ID        string
			ExpiresAt string `json:"expires_at"`
		}
		Again, Next, StreamedStdout, StreamedCommand, StreamedContainer string
		SameContainer                                                   bool
		Errors                                                          map[string][]any
		Models                                                          []string
		Model                                                           string
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("node printed %s", out)
	}
	if strings.Join(seen.Types, ",") != "server_tool_use,bash_code_execution_tool_result,text" {
		t.Errorf("content %v", seen.Types)
	}
	if seen.Call.Name != "bash_code_execution" || !strings.Contains(seen.Call.Input.Command, "echo from-anthropic") ||
		seen.Result.Content.Type != "bash_code_execution_result" || seen.Result.Content.Stdout != "from-anthropic\n" ||
		seen.Result.Content.ReturnCode == nil || *seen.Result.Content.ReturnCode != 0 {
		t.Errorf("call %+v, result %+v", seen.Call, seen.Result)
	}
	if seen.Stop != "end_turn" || seen.Usage.InputTokens == 0 || seen.Usage.ServerToolUse.CodeExecutionRequests != 1 {
		t.Errorf("stop %q, usage %+v", seen.Stop, seen.Usage)
	}
	if seen.Container.ID == "" || seen.Container.ExpiresAt == "" || seen.Again != "from-anthropic\n" || !seen.SameContainer {
		t.Errorf("container %+v, second request saw %q in it (same: %v)", seen.Container, seen.Again, seen.SameContainer)
	}
	if seen.Next != "text" {
		t.Errorf("the conversation given back answered %q", seen.Next)
	}
	if strings.Join(seen.StreamedTypes, ",") != "server_tool_use,bash_code_execution_tool_result,text" ||
		seen.StreamedStdout != "streamed-anthropic\n" || seen.StreamedCommand != "echo streamed-anthropic" || seen.StreamedContainer == "" {
		t.Errorf("streamed %v %q %q %q", seen.StreamedTypes, seen.StreamedStdout, seen.StreamedCommand, seen.StreamedContainer)
	}
	if len(seen.Events) < 2 || seen.Events[0] != "message_start" || seen.Events[len(seen.Events)-1] != "message_stop" {
		t.Errorf("events %v", seen.Events)
	}
	for name, want := range map[string]string{
		"notFound":  `["NotFoundError",404,"not_found_error"]`,
		"auth":      `["AuthenticationError",401]`,
		"container": `["NotFoundError",404]`,
	} {
		if got, _ := json.Marshal(seen.Errors[name]); string(got) != want {
			t.Errorf("error %s: %s, want %s", name, got, want)
		}
	}
	if !slices.Contains(seen.Models, "default") || seen.Model != "model" {
		t.Errorf("models %v, default's type %q", seen.Models, seen.Model)
	}
	if bad := seen.Errors["bad"]; len(bad) != 3 || bad[0] != "BadRequestError" || !strings.Contains(bad[2].(string), "messages[0].role") {
		t.Errorf("bad request: %v", bad)
	}
}

// aiSDKAnthropicScript asks Vercel's AI SDK, through its Anthropic
// provider, for a text that runs a command in conch's code execution
// tool, once and streamed.
const aiSDKAnthropicScript = `
const { generateText, streamText } = require(process.env.AI_SDK);
const { createAnthropic } = require(process.env.AI_SDK_ANTHROPIC);
const anthropic = createAnthropic({ baseURL: process.env.CONCH_URL + "/v1", apiKey: process.env.CONCH_API_KEY });
const tools = { code_execution: anthropic.tools.codeExecution_20250825() };
(async () => {
  const r = await generateText({ model: anthropic("default"), prompt: "run: echo from-ai-sdk-anthropic", tools });
  const s = streamText({ model: anthropic("default"), prompt: "run: echo streamed-ai-sdk-anthropic", tools });
  let streamed = "";
  for await (const d of s.textStream) streamed += d;
  console.log(JSON.stringify({ text: r.text, content: r.content.map((c) => c.type), results: r.content.filter((c) => c.type === "tool-result").map((c) => c.output), streamed }));
})().catch((e) => { console.error(e); process.exit(1); });
`

// TestAISDKAnthropic: Vercel's AI SDK with its Anthropic provider sees
// conch's code execution tool as the provider's own: a call the provider
// ran, with its result.
func TestAISDKAnthropic(t *testing.T) {
	modules := nodeModules(t)
	d := startDev(t)
	script := filepath.Join(t.TempDir(), "aisdk-anthropic.cjs")
	if err := os.WriteFile(script, []byte(aiSDKAnthropicScript), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "node", script)
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key,
		"AI_SDK="+filepath.Join(modules, "ai"), "AI_SDK_ANTHROPIC="+filepath.Join(modules, "@ai-sdk", "anthropic"))
	// The SDK warns on stderr about a model it does not know.
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s%s", err, out, stderr.String())
	}
	var seen struct {
		Text, Streamed string
		Content        []string
		Results        []json.RawMessage
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("node printed %s", out)
	}
	if !strings.Contains(seen.Text, "from-ai-sdk-anthropic") || strings.Join(seen.Content, ",") != "tool-call,tool-result,text" ||
		len(seen.Results) != 1 || !strings.Contains(string(seen.Results[0]), "from-ai-sdk-anthropic") || !strings.Contains(seen.Streamed, "streamed-ai-sdk-anthropic") {
		t.Errorf("AI SDK saw %+v", seen)
	}
}
