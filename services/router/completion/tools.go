package completion

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	routerv1 "github.com/conch-sh/conch/gen/go/conch/router/v1"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/gateways"
	"github.com/conch-sh/conch/services/router/loop"
	"github.com/conch-sh/conch/services/router/toolhost"
	"github.com/conch-sh/conch/services/router/upstream"
)

// toolPlan is what the model is offered for one completion.
type toolPlan struct {
	tools      []upstream.Tool
	shell      *loop.Shell
	persistent bool
	workspace  *Workspace        // what the response says of the user's workspace
	direct     map[string]bool   // server tools offered to the model
	moved      []*toolhost.Tool  // server tools moved into the shell
	skills     map[string]string // read_skill's texts
	execOutput int32             // output limit of exec; 0: not offered
	editor     bool              // the file editor is offered beside the shell
	network    *executorv1.Network
	mounted    []MountedSkill // skills mounted in the sandbox
}

// Workspace says whether a completion that named a user ran its shell in
// that user's persistent workspace, and why not.
type Workspace struct {
	User       string `json:"user"`
	Persistent bool   `json:"persistent"`
	Reason     string `json:"reason,omitempty"`
}

// planTools decides the completion's tools from the gateway, its server
// tools (nil when it has none), the request and the skills it mounts.
func planTools(g *routerv1.Gateway, set *toolhost.Set, req *Request, mounted []MountedSkill) (*toolPlan, error) {
	sh := g.GetShell()
	p := &toolPlan{mounted: mounted}
	var err error
	if p.network, err = shellNetwork(g, req); err != nil {
		return nil, err
	}
	runsShell := !req.ShellLocal && (req.Shell != nil || sh.GetEnabled() || req.Exec)
	p.persistent = sh.GetAllowDataPersistence() && req.User != "" && req.Container == "" && runsShell
	if req.User != "" && runsShell {
		p.workspace = &Workspace{User: req.User, Persistent: p.persistent}
		switch {
		case req.Container != "":
			p.workspace.Reason = "a container keeps the workspace it was created with"
		case !p.persistent:
			p.workspace.Reason = fmt.Sprintf("gateway %q does not allow data persistence (shell.allow_data_persistence): the workspace is empty and ends with its sandbox", g.GetName())
		}
	}
	if p.persistent && !tenant.ValidUserID(req.User) {
		return nil, BadField("user", "must be %s, to name a persistent workspace", tenant.UserIDRule)
	}
	// allow_request is true unless set: the getter of an unset optional
	// field answers false, so ask for presence first.
	if req.Shell != nil && !sh.GetEnabled() && sh != nil && sh.AllowRequest != nil && !sh.GetAllowRequest() {
		return nil, BadField(req.ShellField, "gateway %q does not allow requests to enable the shell tool", g.GetName())
	}
	switch {
	case req.ShellLocal:
		// The client runs the commands: the model's shell calls end the
		// completion like any client tool call, and nothing can be moved
		// into a shell conch does not run.
		limits := ShellLimits(g, req.Shell)
		p.tools = append(p.tools, upstream.Tool{Name: "shell", Description: localShellDescription(limits), Parameters: shellParameters})
		if set != nil {
			p.addDirect(set.Tools())
		}
	case req.Shell != nil || sh.GetEnabled():
		p.shell = ShellLimits(g, req.Shell)
		if set != nil && req.Container == "" {
			var direct []*toolhost.Tool
			direct, p.moved = set.Split(sh.GetTools())
			p.addDirect(direct)
		} else if set != nil {
			// A container made through the API has no tool commands:
			// the model calls the tools directly.
			p.addDirect(set.Tools())
		}
		p.tools = append(p.tools, shellTool(p.shell, p.persistent, p.network, p.moved, mounted))
		if req.Editor {
			p.editor = true
			p.tools = append(p.tools, upstream.Tool{Name: loop.EditorTool, Parameters: json.RawMessage(loop.EditorSchema),
				Description: "View, create and edit text files in the shell's sandbox: view shows a file's lines, create writes a whole file, str_replace replaces text that occurs once."})
		}
	case set != nil:
		// Without a shell there is nowhere to move tools to.
		p.addDirect(set.Tools())
	}
	if len(mounted) > 0 && p.shell == nil {
		return nil, BadField(req.SkillsField, "skills are mounted in the shell's sandbox, and gateway %q runs no shell for this request: enable the shell (the gateway's shell.enabled, or a shell tool in the request)", g.GetName())
	}
	if req.Exec {
		p.execOutput = gateways.MaxOutputLength(g)
		p.tools = append(p.tools, loop.ExecTools(p.execOutput)...)
	}
	if skills := g.GetSkills(); len(skills) > 0 {
		p.tools = append(p.tools, readSkillTool(skills))
		p.skills = make(map[string]string, len(skills))
		for _, sk := range skills {
			p.skills[sk.GetName()] = sk.GetContent()
		}
	}
	for i, ct := range req.ClientTools {
		if p.direct[ct.Name] {
			return nil, BadField(fmt.Sprintf("tools[%d].function.name", i), "%q is a server tool of gateway %q", ct.Name, g.GetName())
		}
	}
	p.tools = append(p.tools, req.ClientTools...)
	return p, nil
}

// ShellLimits are the shell's limits: the gateway's, with those the
// request set.
func ShellLimits(g *routerv1.Gateway, rs *ShellTool) *loop.Shell {
	sh := &loop.Shell{TimeoutSeconds: gateways.ShellTimeoutSeconds(g), MaxOutputLength: gateways.MaxOutputLength(g)}
	if rs == nil {
		return sh
	}
	if rs.MaxUses != nil {
		sh.MaxUses = int(*rs.MaxUses)
	}
	if rs.TimeoutSeconds != nil {
		sh.TimeoutSeconds = int32(*rs.TimeoutSeconds)
	}
	if rs.MaxOutputLength != nil {
		sh.MaxOutputLength = int32(*rs.MaxOutputLength)
	}
	return sh
}

func (p *toolPlan) addDirect(tools []*toolhost.Tool) {
	if p.direct == nil {
		p.direct = make(map[string]bool, len(tools))
	}
	for _, t := range tools {
		p.direct[t.Name] = true
		p.tools = append(p.tools, upstream.Tool{Name: t.Name, Description: t.Description, Parameters: t.Schema})
	}
}

// readSkillTool is the reserved tool that loads a skill's text.
func readSkillTool(skills []*routerv1.Skill) upstream.Tool {
	var b strings.Builder
	b.WriteString("Load the full text of a skill: instructions for a kind of task. Available skills:")
	names := make([]string, len(skills))
	for i, sk := range skills {
		names[i] = sk.GetName()
		fmt.Fprintf(&b, "\n- %s: %s", sk.GetName(), sk.GetDescription())
	}
	enum, _ := json.Marshal(names)
	params := `{"type":"object","properties":{"name":{"type":"string","enum":` + string(enum) + `,"description":"the skill to load"}},"required":["name"],"additionalProperties":false}`
	return upstream.Tool{Name: "read_skill", Description: b.String(), Parameters: json.RawMessage(params)}
}

var shellParameters = json.RawMessage(`{"type":"object","properties":{"command":{"type":"string","description":"The shell command or script to run with /bin/sh -c."}},"required":["command"],"additionalProperties":false}`)

// shellTool is the function tool the model sees for the shell.
func shellTool(sh *loop.Shell, persistent bool, network *executorv1.Network, moved []*toolhost.Tool, mounted []MountedSkill) upstream.Tool {
	var b strings.Builder
	b.WriteString("Run a shell command in an isolated Linux sandbox and get its output. ")
	b.WriteString("The command runs as `/bin/sh -c <command>`; pipes, redirections, && chains and multi-line scripts work as in a terminal. ")
	b.WriteString("Files, the working directory and background state persist between the calls of this conversation. ")
	if persistent {
		b.WriteString("The workspace /home/workspace (the home and starting directory) is this user's persistent workspace: files there are kept for later conversations. ")
	} else {
		b.WriteString("The workspace /home/workspace (the home and starting directory) is discarded at the end of this conversation. ")
	}
	if network.GetMode() == executorv1.NetworkMode_NETWORK_MODE_ALLOWLIST {
		fmt.Fprintf(&b, "Network access goes through a proxy (already set in HTTP_PROXY, HTTPS_PROXY and ALL_PROXY) and reaches only %s; anything else is refused with HTTP 403. ",
			strings.Join(network.GetAllowedDomains(), ", "))
	} else {
		b.WriteString("There is no network access. ")
	}
	if len(moved) > 0 {
		b.WriteString("Besides the usual programs, these commands are available; each prints its output on stdout, so it can be piped, and `CMD --help` lists its flags:")
		for _, t := range moved {
			fmt.Fprintf(&b, " %s (%s);", t.Name, firstLine(t.Description))
		}
		b.WriteString(" ")
	}
	b.WriteString(skillsDescription(mounted))
	fmt.Fprintf(&b, "Limits: a command is killed after %d seconds; ", sh.TimeoutSeconds)
	fmt.Fprintf(&b, "stdout keeps its first %d characters and stderr what stdout leaves, and a cut field ends with [output truncated]. ", sh.MaxOutputLength)
	if sh.MaxUses > 0 {
		fmt.Fprintf(&b, "At most %d commands run in this conversation. ", sh.MaxUses)
	}
	b.WriteString("To stay within the output limit: filter before printing (grep, head, jq, awk); count first (wc -l) and then fetch slices (sed -n '1,50p'); ")
	b.WriteString("write large results to a file in /home/workspace and read back only the part you need. ")
	b.WriteString(`The result is JSON: {"stdout", "stderr", "outcome": {"type": "exit", "exit_code"}}, or outcome type "timeout", or type "error" with "error" saying why.`)
	return upstream.Tool{Name: "shell", Description: b.String(), Parameters: shellParameters}
}

// localShellDescription is the shell tool the model sees when the client
// runs the commands.
func localShellDescription(sh *loop.Shell) string {
	return "Run a shell command in the user's environment and get its output. The command runs as `/bin/sh -c <command>`. " +
		fmt.Sprintf("Limits: a command is stopped after %d seconds; output keeps its first %d characters. ", sh.TimeoutSeconds, sh.MaxOutputLength) +
		"Filter before printing (grep, head, wc -l) to stay within the output limit."
}

// sandboxRequest is how the completion's sandbox is created.
func (p *toolPlan) sandboxRequest(g *routerv1.Gateway, req *Request) *executorv1.CreateSandboxRequest {
	sh := g.GetShell()
	r := &executorv1.CreateSandboxRequest{
		Limits:   sh.GetLimits(),
		Network:  p.network,
		Agent:    g.GetName(),
		Template: sh.GetTemplate(),
	}
	if p.persistent {
		r.User, r.Persistent = req.User, true
	}
	if e := g.GetExec(); e != nil {
		r.PathPrepend = e.GetPathPrepend()
	}
	for _, m := range p.mounted {
		r.Skills = append(r.Skills, m.Bundle)
	}
	for _, t := range p.moved {
		r.Tools = append(r.Tools, &executorv1.ToolCommand{Name: t.Name, Description: t.Description, ParametersSchema: string(t.Schema)})
	}
	return r
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if s == "" {
		return "no description"
	}
	return s
}

// sandbox creates the completion's sandbox on first use and destroys it at
// the end. ready runs once it exists, gone before it is destroyed; either
// may be nil.
type sandbox struct {
	exec  executorv1.ExecutorServiceClient
	req   *executorv1.CreateSandboxRequest
	ready func(ctx context.Context, id string) error
	gone  func(ctx context.Context, id string)
	log   *slog.Logger

	mu  sync.Mutex
	id  string
	err error
}

var _ loop.Sandbox = (*sandbox)(nil)

// ID implements loop.Sandbox.
func (s *sandbox) ID(ctx context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != "" || s.err != nil {
		return s.id, s.err
	}
	resp, err := s.exec.CreateSandbox(ctx, s.req)
	if err != nil {
		// A failed creation is not retried within one completion: every
		// later call gets the same error at once.
		s.err = err
		return "", err
	}
	if s.ready != nil {
		if err := s.ready(ctx, resp.GetId()); err != nil {
			s.err = err
			_, _ = s.exec.DestroySandbox(context.WithoutCancel(ctx), &executorv1.DestroySandboxRequest{Id: resp.GetId()})
			return "", err
		}
	}
	s.id = resp.GetId()
	return s.id, nil
}

// Current implements completionSandbox.
func (s *sandbox) Current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// Destroy ends the sandbox, if the completion made one.
func (s *sandbox) Destroy(ctx context.Context) {
	s.mu.Lock()
	id := s.id
	s.mu.Unlock()
	if id == "" {
		return
	}
	if s.gone != nil {
		s.gone(ctx, id)
	}
	if _, err := s.exec.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: id}); err != nil {
		s.log.WarnContext(ctx, "sandbox destroy failed", "sandbox", id, "error", err)
	}
}
