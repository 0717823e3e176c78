package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/execpolicy"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/internal/platform/wirejson"
	"github.com/conch-sh/conch/services/internal/toolresult"
	"github.com/conch-sh/conch/services/router/upstream"
)

// Defaults of the rich exec tool (docs/reference/tools.md).
const (
	defaultYieldMs     = 10000
	defaultExecTimeout = int32(contract.ExecTimeout / time.Second)
)

// ExecTools are the model tools exec and process.
func ExecTools(maxOutput int32) []upstream.Tool {
	return []upstream.Tool{
		{
			Name: "exec",
			Description: "Run a shell command with /bin/sh -c. On host sandbox (the default) it runs in this conversation's isolated sandbox. " +
				"A command still running after yieldMs milliseconds (default 10000) moves to the background and the call returns " +
				`{"status": "running", "sessionId"} with the output so far; follow it with the process tool. ` +
				fmt.Sprintf("Output keeps %d characters per call. ", maxOutput) +
				"env may not set PATH, LD_*, DYLD_* or other loader or interpreter hooks.",
			Parameters: json.RawMessage(`{"type":"object","properties":{
				"command":{"type":"string","description":"the command or script"},
				"workdir":{"type":"string","description":"working directory"},
				"env":{"type":"object","additionalProperties":{"type":"string"},"description":"extra environment variables"},
				"yieldMs":{"type":"integer","minimum":0,"description":"move to the background after this many milliseconds (default 10000)"},
				"background":{"type":"boolean","description":"start in the background at once"},
				"timeout":{"type":"integer","minimum":1,"maximum":86400,"description":"seconds before the command is killed (default 1800)"},
				"pty":{"type":"boolean","description":"run under a pseudo-terminal"},
				"host":{"type":"string","enum":["sandbox","gateway","node"],"description":"where to run (default sandbox)"},
				"security":{"type":"string","enum":["deny","allowlist","full"],"description":"tighten the exec security for this command"},
				"ask":{"type":"string","enum":["off","on-miss","always"],"description":"tighten when a human is asked"},
				"node":{"type":"string","description":"paired node for host node"}},
				"required":["command"],"additionalProperties":false}`),
		},
		{
			Name:        "process",
			Description: "Follow commands that exec moved to the background: list them, poll new output, read the log, write to stdin, or kill one.",
			Parameters: json.RawMessage(`{"type":"object","properties":{
				"action":{"type":"string","enum":["list","poll","log","write","kill"]},
				"sessionId":{"type":"string","description":"the process, from exec"},
				"data":{"type":"string","description":"text to write to stdin (action write)"},
				"offset":{"type":"integer","minimum":0,"description":"first line (action log)"},
				"limit":{"type":"integer","minimum":0,"description":"number of lines (action log)"}},
				"required":["action"],"additionalProperties":false}`),
		},
	}
}

type execArgs struct {
	Command    *string           `json:"command"`
	Workdir    string            `json:"workdir"`
	Env        map[string]string `json:"env"`
	YieldMs    *int32            `json:"yieldMs"`
	Background bool              `json:"background"`
	Timeout    int32             `json:"timeout"`
	Pty        bool              `json:"pty"`
	Host       string            `json:"host"`
	Security   string            `json:"security"`
	Ask        string            `json:"ask"`
	Node       string            `json:"node"`
}

// execResult is what the model receives from exec.
type execResult struct {
	Status    string `json:"status"` // running, completed, failed
	SessionID string `json:"sessionId,omitempty"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Outcome   any    `json:"outcome,omitempty"`
	Error     string `json:"error,omitempty"`
}

func execError(msg string) string {
	b, _ := json.Marshal(execResult{Status: "failed", Outcome: map[string]string{"type": "error"}, Error: msg})
	return string(b)
}

// runExec runs the exec tool.
func (cfg *Config) runExec(ctx context.Context, call upstream.ToolCall, ev Events) string {
	var a execArgs
	if err := wirejson.Strict([]byte(call.Arguments), &a); err != nil {
		return execError(`exec: arguments must be a JSON object with a string "command": ` + err.Error())
	}
	if a.Command == nil {
		return execError(`exec: arguments must be a JSON object with a string "command"`)
	}
	if len(*a.Command) > MaxCommandBytes {
		return execError(fmt.Sprintf("exec: command is %d bytes; the limit is 1 MiB (%d bytes)", len(*a.Command), MaxCommandBytes))
	}
	settings, msg := requestSettings(cfg.Exec.Settings, a)
	if msg != "" {
		return execError(msg)
	}
	host := settings.GetHost()
	req := &executorv1.ExecRequest{
		Command:         *a.Command,
		Workdir:         a.Workdir,
		Env:             a.Env,
		TimeoutSeconds:  a.Timeout,
		MaxOutputLength: cfg.ExecOutput,
		Pty:             a.Pty,
		YieldMs:         defaultYieldMs,
		Background:      a.Background,
		Host:            host,
		Node:            settings.GetNode(),
		Settings:        settings,
		Agent:           cfg.Exec.Agent,
		Session:         cfg.Exec.Session,
		User:            cfg.Exec.User,
	}
	if a.YieldMs != nil {
		req.YieldMs = *a.YieldMs
	}
	if req.TimeoutSeconds == 0 {
		req.TimeoutSeconds = defaultExecTimeout
	}
	// A gateway-host command runs on the executor of the completion's
	// sandbox, which keeps its process records for the process tool.
	if host != approvalv1.Host_HOST_NODE {
		id, err := cfg.sandboxID(ctx)
		if err != nil {
			return execError("sandbox: " + message(err))
		}
		req.SandboxId = id
	}
	run, err := cfg.exec(ctx, req, call, ev)
	if err != nil {
		return execError(err.Error())
	}
	if run.backgrounded != "" {
		// The output so far, cut like any other.
		out, errOut, _, _ := toolresult.Cap(string(run.stdout), string(run.stderr), int(cfg.ExecOutput), false, false)
		b, _ := json.Marshal(execResult{Status: "running", SessionID: run.backgrounded, Stdout: out, Stderr: errOut})
		return string(b)
	}
	r := toolresult.FromExec(run.stdout, run.stderr, int(cfg.ExecOutput), run.finished)
	res := execResult{Status: "completed", SessionID: run.processID, Stdout: r.GetStdout(), Stderr: r.GetStderr(), Error: r.GetError()}
	outcome, _ := restjson.New().Marshal(r.GetOutcome())
	res.Outcome = json.RawMessage(outcome)
	if r.GetOutcome().GetType() != executorv1.OutcomeType_OUTCOME_TYPE_EXIT || r.GetOutcome().GetExitCode() != 0 {
		res.Status = "failed"
	}
	b, _ := json.Marshal(res)
	return string(b)
}

// requestSettings layers the settings the model asked for over the
// gateway's gw. The model may tighten the policy for one command, never
// loosen it: a looser security or ask simply leaves the gateway's, while a
// host or node it may not use is an error the model can correct, returned
// as the message to show it.
func requestSettings(gw *approvalv1.ExecSettings, a execArgs) (*approvalv1.ExecSettings, string) {
	settings, refused := execpolicy.Tighten(gw, execpolicy.Override{Host: a.Host, Security: a.Security, Ask: a.Ask, Node: a.Node})
	for _, r := range refused {
		if msg := execRefused(r, gw); msg != "" {
			return nil, msg
		}
	}
	return settings, ""
}

// execRefused is what the model is told about a setting of its request
// that was not applied, or "" when it need not know: a looser security or
// ask than the gateway's is not an error, the gateway's simply stays.
func execRefused(r execpolicy.Refusal, gw *approvalv1.ExecSettings) string {
	unknown := errors.Is(r.Err, execpolicy.ErrUnknownWord)
	switch {
	case r.Field == "host" && unknown:
		return "exec: host must be sandbox, gateway or node"
	case r.Field == "host":
		return fmt.Sprintf("exec: host %s is not allowed by this gateway (its host is %s)", r.Value, execpolicy.Word(execpolicy.Hosts, gw.GetHost()))
	case r.Field == "node" && errors.Is(r.Err, execpolicy.ErrOtherNode):
		return fmt.Sprintf("exec: node %s is not allowed by this gateway (its node is %s)", r.Value, gw.GetNode())
	case r.Field == "node":
		return "exec: node is only for host node"
	case r.Field == "security" && unknown:
		return "exec: security must be deny, allowlist or full"
	case r.Field == "ask" && unknown:
		return "exec: ask must be off, on-miss or always"
	}
	return ""
}

type processArgs struct {
	Action    string `json:"action"`
	SessionID string `json:"sessionId"`
	Data      string `json:"data"`
	Offset    int64  `json:"offset"`
	Limit     int64  `json:"limit"`
}

// runProcess runs the process tool.
func (cfg *Config) runProcess(ctx context.Context, call upstream.ToolCall) string {
	var a processArgs
	if err := wirejson.Strict([]byte(call.Arguments), &a); err != nil {
		return "Error: process: arguments must be a JSON object: " + err.Error()
	}
	if a.Action != "list" && a.SessionID == "" {
		return "Error: process: sessionId is required for action " + a.Action
	}
	id, err := cfg.sandboxID(ctx)
	if err != nil {
		return "Error: sandbox: " + message(err)
	}
	var resp proto.Message
	switch a.Action {
	case "list":
		resp, err = cfg.Executor.ListProcesses(ctx, &executorv1.ListProcessesRequest{SandboxId: id})
	case "poll":
		resp, err = cfg.Executor.PollProcess(ctx, &executorv1.PollProcessRequest{SandboxId: id, ProcessId: a.SessionID, WaitMs: 1000})
	case "log":
		resp, err = cfg.Executor.ReadProcessLog(ctx, &executorv1.ReadProcessLogRequest{SandboxId: id, ProcessId: a.SessionID, Offset: a.Offset, Limit: a.Limit})
	case "write":
		resp, err = cfg.Executor.WriteProcess(ctx, &executorv1.WriteProcessRequest{SandboxId: id, ProcessId: a.SessionID, Data: []byte(a.Data)})
	case "kill":
		resp, err = cfg.Executor.KillProcess(ctx, &executorv1.KillProcessRequest{SandboxId: id, ProcessId: a.SessionID})
	default:
		return "Error: process: action must be list, poll, log, write or kill"
	}
	if err != nil {
		return "Error: process " + a.Action + ": " + message(err)
	}
	b, err := restjson.New().Marshal(resp)
	if err != nil {
		return "Error: process: " + err.Error()
	}
	if s := strings.TrimSpace(string(b)); s != "{}" {
		return s
	}
	return `{"ok":true}`
}
