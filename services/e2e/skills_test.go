package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// skillAnthropicScript uploads a skill with Anthropic's SDK, adds a
// version, has the model read the skill in a message's container, and
// deletes it, printing what it saw as JSON.
const skillAnthropicScript = `
const Anthropic = require(process.env.ANTHROPIC_SDK);
const { toFile } = Anthropic;
const client = new Anthropic({ baseURL: process.env.CONCH_URL, apiKey: process.env.CONCH_API_KEY, maxRetries: 0 });
const md = (v) => "---\nname: greeting\ndescription: Greets people in the house style.\n---\nSay hello-from-skill-" + v + ".\n";
const tools = [{ type: "code_execution_20250825", name: "code_execution" }];
(async () => {
  const seen = {};
  const skill = await client.beta.skills.create({ display_name: "Greeting",
    files: [await toFile(Buffer.from(md(1)), "greeting/SKILL.md"), await toFile(Buffer.from("echo hi\n"), "greeting/scripts/hi.sh")] });
  seen.skill = skill;
  const v2 = await client.beta.skills.versions.create(skill.id, { files: [await toFile(Buffer.from(md(2)), "greeting/SKILL.md")] });
  seen.version = v2;
  const versions = [];
  for await (const v of client.beta.skills.versions.list(skill.id)) versions.push(v.id);
  seen.versions = versions;
  const listed = [];
  for await (const s of client.beta.skills.list()) listed.push(s.id);
  seen.listed = listed.includes(skill.id);

  const msg = await client.beta.messages.create({ model: "default", max_tokens: 512, tools,
    container: { skills: [{ type: "custom", skill_id: skill.id, version: "latest" }] },
    messages: [{ role: "user", content: "run: cat /mnt/skills/greeting/SKILL.md; touch /mnt/skills/greeting/x" }] });
  const result = msg.content.find((b) => b.type === "bash_code_execution_tool_result");
  seen.stdout = result.content.stdout;
  seen.stderr = result.content.stderr;
  seen.container = msg.container;

  const pinned = await client.beta.messages.create({ model: "default", max_tokens: 512, tools,
    container: { skills: [{ type: "custom", skill_id: skill.id, version: "1" }] },
    messages: [{ role: "user", content: "run: cat /mnt/skills/greeting/SKILL.md" }] });
  seen.pinned = pinned.content.find((b) => b.type === "bash_code_execution_tool_result").content.stdout;

  const errs = {};
  try { await client.beta.messages.create({ model: "default", max_tokens: 10, tools,
    container: { skills: [{ type: "custom", skill_id: "skill_0000" }] }, messages: [{ role: "user", content: "run: ls" }] }); }
  catch (e) { errs.unknown = [e.constructor.name, e.status, e.error && e.error.error && e.error.error.message]; }
  try { await client.beta.skills.create({ files: [await toFile(Buffer.from("no front matter"), "x/SKILL.md")] }); }
  catch (e) { errs.bad = [e.constructor.name, e.status, e.error && e.error.error && e.error.error.message]; }
  seen.deletedVersion = await client.beta.skills.versions.delete("1", { skill_id: skill.id });
  seen.deleted = await client.beta.skills.delete(skill.id);
  try { await client.beta.skills.retrieve(skill.id); }
  catch (e) { errs.gone = [e.constructor.name, e.status]; }
  seen.errors = errs;
  console.log(JSON.stringify(seen));
})().catch((e) => { console.error(e); process.exit(1); });
`

// TestSkillsAnthropicSDK: a skill uploaded with Anthropic's SDK is
// mounted read-only in the container of a message that names it.
func TestSkillsAnthropicSDK(t *testing.T) {
	modules := nodeModules(t)
	d := startDev(t)
	out := runSkillScript(t, skillAnthropicScript, "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key,
		"ANTHROPIC_SDK="+filepath.Join(modules, "@anthropic-ai", "sdk"))
	var seen struct {
		Skill struct {
			ID              string
			Type            string
			DisplayName     string `json:"display_name"`
			LatestVersionID string `json:"latest_version_id"`
		}
		Version struct {
			ID, Type, Name string
			SkillID        string `json:"skill_id"`
		}
		Versions       []string
		Listed         bool
		Stdout, Stderr string
		Pinned         string
		Container      struct {
			ID     string
			Skills []struct {
				Type, Version string
				SkillID       string `json:"skill_id"`
			}
		}
		DeletedVersion struct{ ID, Type string }
		Deleted        struct{ ID, Type string }
		Errors         map[string][]any
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("node printed %s", out)
	}
	id := seen.Skill.ID
	if !strings.HasPrefix(id, "skill_") || seen.Skill.Type != "skill" || seen.Skill.DisplayName != "Greeting" || seen.Skill.LatestVersionID != "1" {
		t.Errorf("skill %+v", seen.Skill)
	}
	if seen.Version.ID != "2" || seen.Version.Type != "skill_version" || seen.Version.Name != "greeting" || seen.Version.SkillID != id ||
		strings.Join(seen.Versions, ",") != "1,2" || !seen.Listed {
		t.Errorf("version %+v, versions %v, listed %v", seen.Version, seen.Versions, seen.Listed)
	}
	if !strings.Contains(seen.Stdout, "Say hello-from-skill-2.") || !strings.Contains(seen.Stderr, "Read-only file system") {
		t.Errorf("in the sandbox: stdout %q, stderr %q", seen.Stdout, seen.Stderr)
	}
	if !strings.Contains(seen.Pinned, "Say hello-from-skill-1.") {
		t.Errorf("version 1 pinned: %q", seen.Pinned)
	}
	if len(seen.Container.Skills) != 1 || seen.Container.Skills[0].SkillID != id || seen.Container.Skills[0].Version != "2" || seen.Container.Skills[0].Type != "custom" {
		t.Errorf("container %+v", seen.Container)
	}
	if seen.DeletedVersion.Type != "skill_version_deleted" || seen.Deleted.ID != id || seen.Deleted.Type != "skill_deleted" {
		t.Errorf("deleted %+v %+v", seen.DeletedVersion, seen.Deleted)
	}
	if e := seen.Errors["unknown"]; len(e) != 3 || e[0] != "NotFoundError" || !strings.Contains(e[2].(string), "container.skills[0].skill_id") {
		t.Errorf("unknown skill: %v", e)
	}
	if e := seen.Errors["bad"]; len(e) != 3 || e[0] != "BadRequestError" || !strings.Contains(e[2].(string), "front matter") {
		t.Errorf("bad upload: %v", e)
	}
	if e, _ := json.Marshal(seen.Errors["gone"]); string(e) != `["NotFoundError",404]` {
		t.Errorf("deleted skill: %s", e)
	}
}

// skillOpenAIScript uploads a skill with OpenAI's SDK, names it in the
// Responses API's shell environment, and manages its versions.
const skillOpenAIScript = `
const OpenAI = require(process.env.OPENAI_SDK);
const { toFile } = OpenAI;
const client = new OpenAI({ baseURL: process.env.CONCH_URL + "/v1", apiKey: process.env.CONCH_API_KEY, maxRetries: 0 });
const md = (v) => "---\nname: greeting\ndescription: Greets people in the house style.\n---\nSay hello-from-skill-" + v + ".\n";
(async () => {
  const seen = {};
  const skill = await client.skills.create({ files: [await toFile(Buffer.from(md(1)), "greeting/SKILL.md"), await toFile(Buffer.from("echo hi\n"), "greeting/hi.sh")] });
  seen.skill = skill;
  const v2 = await client.skills.versions.create(skill.id, { files: [await toFile(Buffer.from(md(2)), "greeting/SKILL.md")] });
  seen.version = v2;
  seen.retrieved = await client.skills.retrieve(skill.id);

  const shell = (version) => [{ type: "shell", environment: { type: "container_auto", skills: [{ type: "skill_reference", skill_id: skill.id, version }] } }];
  const r = await client.responses.create({ model: "default", input: "run: cat /mnt/skills/greeting/SKILL.md", tools: shell(undefined) });
  seen.defaultStdout = r.output.find((i) => i.type === "shell_call_output").output[0].stdout;
  // A continuation goes on in r's container, which has version 1.
  const cont = await client.responses.create({ model: "default", input: "run: cat /mnt/skills/greeting/SKILL.md", previous_response_id: r.id, tools: shell("1") });
  seen.continuedStdout = cont.output.find((i) => i.type === "shell_call_output").output[0].stdout;
  try { await client.responses.create({ model: "default", input: "run: ls", previous_response_id: r.id, tools: shell("latest") }); }
  catch (e) { seen.continuedOther = [e.constructor.name, e.status, e.param]; }
  const latest = await client.responses.create({ model: "default", input: "run: cat /mnt/skills/greeting/SKILL.md", tools: shell("latest") });
  seen.latestStdout = latest.output.find((i) => i.type === "shell_call_output").output[0].stdout;

  const ctr = await client.containers.create({ name: "with-skill", skills: [{ type: "skill_reference", skill_id: skill.id, version: "2" }] });
  const inCtr = await client.responses.create({ model: "default", input: "run: cat /mnt/skills/greeting/SKILL.md",
    tools: [{ type: "shell", environment: { type: "container_reference", container_id: ctr.id } }] });
  seen.containerStdout = inCtr.output.find((i) => i.type === "shell_call_output").output[0].stdout;
  await client.containers.delete(ctr.id);

  seen.updated = await client.skills.update(skill.id, { default_version: "2" });
  const content = await client.skills.content.retrieve(skill.id);
  seen.zip = Buffer.from(await content.arrayBuffer()).subarray(0, 2).toString();
  const versions = [];
  for await (const v of client.skills.versions.list(skill.id, { order: "asc" })) versions.push(v.version);
  seen.versions = versions;

  const errs = {};
  try { await client.responses.create({ model: "default", input: "run: ls", tools: [{ type: "shell", environment: { type: "container_auto", skills: [{ type: "skill_reference", skill_id: skill.id, version: "9" }] } }] }); }
  catch (e) { errs.version = [e.constructor.name, e.status, e.param]; }
  try { await client.skills.create({ files: [await toFile(Buffer.from(md(1)), "SKILL.md")] }); }
  catch (e) { errs.flat = [e.constructor.name, e.status, e.param]; }
  try { await new OpenAI({ baseURL: process.env.CONCH_URL + "/v1", apiKey: "sk-wrong", maxRetries: 0 }).skills.retrieve(skill.id); }
  catch (e) { errs.auth = [e.constructor.name, e.status]; }
  seen.deleted = await client.skills.delete(skill.id);
  try { await client.skills.retrieve(skill.id); }
  catch (e) { errs.gone = [e.constructor.name, e.status]; }
  seen.errors = errs;
  console.log(JSON.stringify(seen));
})().catch((e) => { console.error(e); process.exit(1); });
`

// TestSkillsOpenAISDK: a skill uploaded with OpenAI's SDK is mounted in
// the container a Responses request's shell tool makes, and in one the
// Containers API makes.
func TestSkillsOpenAISDK(t *testing.T) {
	modules := nodeModules(t)
	d := startDev(t)
	out := runSkillScript(t, skillOpenAIScript, "CONCH_URL="+d.URL, "CONCH_API_KEY="+d.Key, "OPENAI_SDK="+filepath.Join(modules, "openai"))
	type skill struct {
		ID, Object, Name, Description string
		DefaultVersion                string `json:"default_version"`
		LatestVersion                 string `json:"latest_version"`
	}
	var seen struct {
		Skill, Retrieved, Updated   skill
		Version                     struct{ Object, Version, Name string }
		DefaultStdout, LatestStdout string
		ContainerStdout             string
		ContinuedStdout             string
		ContinuedOther              []any
		Zip                         string
		Versions                    []string
		Deleted                     struct {
			ID, Object string
			Deleted    bool
		}
		Errors map[string][]any
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("node printed %s", out)
	}
	if seen.Skill.Object != "skill" || seen.Skill.Name != "greeting" || seen.Skill.Description != "Greets people in the house style." || seen.Skill.DefaultVersion != "1" {
		t.Errorf("skill %+v", seen.Skill)
	}
	if seen.Version.Object != "skill.version" || seen.Version.Version != "2" || seen.Retrieved.LatestVersion != "2" || seen.Retrieved.DefaultVersion != "1" {
		t.Errorf("version %+v, retrieved %+v", seen.Version, seen.Retrieved)
	}
	if !strings.Contains(seen.DefaultStdout, "hello-from-skill-1") || !strings.Contains(seen.LatestStdout, "hello-from-skill-2") {
		t.Errorf("default version read %q, latest %q", seen.DefaultStdout, seen.LatestStdout)
	}
	if !strings.Contains(seen.ContinuedStdout, "hello-from-skill-1") {
		t.Errorf("the continuation read %q", seen.ContinuedStdout)
	}
	if got, _ := json.Marshal(seen.ContinuedOther); string(got) != `["BadRequestError",400,"tools[0].environment.skills"]` {
		t.Errorf("a continuation naming other skills: %s", got)
	}
	if !strings.Contains(seen.ContainerStdout, "hello-from-skill-2") {
		t.Errorf("the container made with the skill read %q", seen.ContainerStdout)
	}
	if seen.Updated.DefaultVersion != "2" || seen.Zip != "PK" || strings.Join(seen.Versions, ",") != "1,2" {
		t.Errorf("updated %+v, content %q, versions %v", seen.Updated, seen.Zip, seen.Versions)
	}
	if seen.Deleted.Object != "skill.deleted" || !seen.Deleted.Deleted || seen.Deleted.ID != seen.Skill.ID {
		t.Errorf("deleted %+v", seen.Deleted)
	}
	for name, want := range map[string]string{
		"version": `["NotFoundError",404,"tools[0].environment.skills[0].version"]`,
		"flat":    `["BadRequestError",400,"files"]`,
		"gone":    `["NotFoundError",404]`,
		"auth":    `["AuthenticationError",401]`,
	} {
		if got, _ := json.Marshal(seen.Errors[name]); string(got) != want {
			t.Errorf("error %s: %s, want %s", name, got, want)
		}
	}
}

func runSkillScript(t *testing.T, script string, env ...string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "skills.cjs")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "node", path)
	cmd.Env = append(cleanEnv(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s%s", err, out, stderr.String())
	}
	return out
}
