package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// nodeModules is the node_modules holding the official OpenAI SDK for
// Node: $CONCH_NODE_MODULES (set by .ci/run), else installed by
// scripts/node-sdk.sh into .cache/node.
func nodeModules(t *testing.T) string {
	t.Helper()
	if m := os.Getenv("CONCH_NODE_MODULES"); m != "" {
		return m
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "scripts", "node-sdk.sh")).Output()
	if err != nil {
		t.Fatalf("scripts/node-sdk.sh (needs node and npm: scripts/deps.sh --test): %v", err)
	}
	return strings.TrimSpace(string(out))
}

// nodeScript drives conch dev with the official SDK in its default mode,
// the Responses API: a shell call in a sandbox, the same streamed, and a
// conversation continued with previous_response_id. It prints what it saw
// as JSON.
const nodeScript = `
const OpenAI = require(process.env.OPENAI_SDK);
const client = new OpenAI({ baseURL: process.env.CONCH_URL + "/v1", apiKey: process.env.CONCH_API_KEY, maxRetries: 0 });
(async () => {
  const seen = {};
  const first = await client.responses.create({ model: "default", input: "run: echo from-node", tools: [{ type: "shell" }] });
  seen.types = first.output.map((i) => i.type);
  seen.stdout = first.output.find((i) => i.type === "shell_call_output").output[0].stdout;
  seen.outputText = first.output_text;

  const stream = await client.responses.create({ model: "default", input: "run: echo streamed-node", tools: [{ type: "shell" }], stream: true });
  seen.events = [];
  for await (const ev of stream) {
    seen.events.push(ev.type);
    if (ev.type === "response.completed") seen.streamedText = ev.response.output_text;
  }

  const next = await client.responses.create({ model: "default", input: "hello again", previous_response_id: first.id });
  seen.previous = next.previous_response_id;
  const got = await client.responses.retrieve(next.id);
  seen.retrieved = got.id === next.id;
  console.log(JSON.stringify(seen));
})().catch((e) => { console.error(e); process.exit(1); });
`

func TestResponsesNodeSDK(t *testing.T) {
	modules := nodeModules(t)
	d := startDev(t)
	script := filepath.Join(t.TempDir(), "responses.cjs")
	if err := os.WriteFile(script, []byte(nodeScript), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "node", script)
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key, "OPENAI_SDK="+filepath.Join(modules, "openai"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var seen struct {
		Types                  []string
		Stdout, OutputText     string
		Events                 []string
		StreamedText, Previous string
		Retrieved              bool
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("node printed %s", out)
	}
	if strings.Join(seen.Types, ",") != "shell_call,shell_call_output,message" || seen.Stdout != "from-node\n" || !strings.Contains(seen.OutputText, "from-node") {
		t.Errorf("non-streamed: %+v", seen)
	}
	events := strings.Join(seen.Events, ",")
	if !strings.HasPrefix(events, "response.created,response.in_progress,response.output_item.added") ||
		!strings.HasSuffix(events, "response.completed") || !strings.Contains(seen.StreamedText, "streamed-node") {
		t.Errorf("streamed: %s / %q", events, seen.StreamedText)
	}
	if seen.Previous == "" || !seen.Retrieved {
		t.Errorf("continued: %+v", seen)
	}
}

// agentsScript runs an agent of the OpenAI Agents SDK in its default
// mode (the Responses API, no tools of its own) against a gateway whose
// shell conch runs: once, streamed, and again with the first run's
// history. It prints what it saw as JSON.
const agentsScript = `
const OpenAI = require(process.env.OPENAI_SDK);
const { Agent, run, setDefaultOpenAIClient, setTracingDisabled } = require(process.env.AGENTS_SDK);
setTracingDisabled(true);
setDefaultOpenAIClient(new OpenAI({ baseURL: process.env.CONCH_URL + "/v1", apiKey: process.env.CONCH_API_KEY, maxRetries: 0 }));
const agent = new Agent({ name: "ops", instructions: "You run commands.", model: "default" });
(async () => {
  const seen = {};
  const first = await run(agent, "run: echo from-agents");
  seen.final = first.finalOutput;
  seen.calls = first.newItems.filter((i) => i.type === "tool_call_item").map((i) => ({ name: i.rawItem.providerData?.name ?? i.rawItem.name, output: i.rawItem.output }));
  const streamed = await run(agent, "run: echo streamed-agents", { stream: true });
  for await (const _ of streamed) {}
  await streamed.completed;
  seen.streamed = streamed.finalOutput;
  const again = await run(agent, first.history.concat([{ role: "user", content: "run: echo second-turn" }]));
  seen.again = again.finalOutput;
  console.log(JSON.stringify(seen));
})().catch((e) => { console.error(e); process.exit(1); });
`

// TestAgentsSDK: the Agents SDK's default run works against a gateway
// whose shell the client did not declare, and the client still sees what
// ran: conch's shell calls are server calls (mcp_call of server "conch"),
// not shell_call items the SDK would have to run. (Before, the run failed
// with "Model produced shell action without a shell tool".)
func TestAgentsSDK(t *testing.T) {
	modules := nodeModules(t)
	d := startDev(t)
	script := filepath.Join(t.TempDir(), "agents.cjs")
	if err := os.WriteFile(script, []byte(agentsScript), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "node", script)
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key,
		"OPENAI_SDK="+filepath.Join(modules, "openai"), "AGENTS_SDK="+filepath.Join(modules, "@openai", "agents"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var seen struct {
		Final, Streamed, Again string
		Calls                  []struct{ Name, Output string }
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("node printed %s", out)
	}
	if !strings.Contains(seen.Final, "from-agents") || len(seen.Calls) != 1 || seen.Calls[0].Name != "shell" || !strings.Contains(seen.Calls[0].Output, `"stdout":"from-agents\n"`) {
		t.Errorf("run: %+v", seen)
	}
	if !strings.Contains(seen.Streamed, "streamed-agents") || !strings.Contains(seen.Again, "second-turn") {
		t.Errorf("streamed and continued: %+v", seen)
	}
}

// aiSDKScript asks Vercel's AI SDK (its OpenAI provider, whose default is
// the Responses API) for a text that runs a command in conch's shell,
// once and streamed.
const aiSDKScript = `
const { generateText, streamText } = require(process.env.AI_SDK);
const { createOpenAI } = require(process.env.AI_SDK_OPENAI);
const openai = createOpenAI({ baseURL: process.env.CONCH_URL + "/v1", apiKey: process.env.CONCH_API_KEY });
(async () => {
  const r = await generateText({ model: openai("default"), prompt: "run: echo from-ai-sdk" });
  const s = streamText({ model: openai("default"), prompt: "run: echo streamed-ai-sdk" });
  let streamed = "";
  for await (const d of s.textStream) streamed += d;
  console.log(JSON.stringify({ text: r.text, content: r.content.map((c) => c.type), streamed }));
})().catch((e) => { console.error(e); process.exit(1); });
`

// TestAISDK: Vercel's AI SDK runs against a gateway whose shell conch
// runs, and sees the shell's call and result as the provider's own.
func TestAISDK(t *testing.T) {
	modules := nodeModules(t)
	d := startDev(t)
	script := filepath.Join(t.TempDir(), "aisdk.cjs")
	if err := os.WriteFile(script, []byte(aiSDKScript), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "node", script)
	cmd.Env = append(cleanEnv(), "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key,
		"AI_SDK="+filepath.Join(modules, "ai"), "AI_SDK_OPENAI="+filepath.Join(modules, "@ai-sdk", "openai"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var seen struct {
		Text, Streamed string
		Content        []string
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("node printed %s", out)
	}
	if !strings.Contains(seen.Text, "from-ai-sdk") || strings.Join(seen.Content, ",") != "tool-call,tool-result,text" || !strings.Contains(seen.Streamed, "streamed-ai-sdk") {
		t.Errorf("AI SDK saw %+v", seen)
	}
}
