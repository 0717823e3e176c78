// Package loop runs the agent loop of one chat completion: it calls the
// upstream model, runs the server tools the model calls (the shell in an
// executor sandbox), feeds the results back, and stops at a final answer, a
// client tool call, or the iteration limit.
package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/egress"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
	"github.com/conch-sh/conch/services/internal/platform/wirejson"
	"github.com/conch-sh/conch/services/internal/toolresult"
	"github.com/conch-sh/conch/services/internal/utf8stream"
	"github.com/conch-sh/conch/services/router/upstream"
)

var tracer = otel.Tracer("github.com/conch-sh/conch/services/router/loop")

// DefaultMaxIterations bounds the model calls of one completion.
const DefaultMaxIterations = 32

// MaxCommandBytes is the longest shell command that runs.
const MaxCommandBytes = contract.MaxCommandBytes

// keepAliveEvery is how often a streaming client hears from us while a
// tool runs.
const keepAliveEvery = 5 * time.Second

// Shell is the shell tool as configured for one completion.
type Shell struct {
	MaxUses         int   // 0: no limit
	TimeoutSeconds  int32 // 1-300
	MaxOutputLength int32 // characters
	// Workdir is where commands start; empty: the sandbox's current
	// directory, which persists between the calls of a conversation.
	Workdir string
}

// ExecContext is what the executor needs to judge a command: the effective
// exec settings, and the agent, session and user it runs for.
type ExecContext struct {
	Settings *approvalv1.ExecSettings
	Agent    string
	Session  string
	User     string
}

// ServerTools runs server tools by name.
type ServerTools interface {
	Call(ctx context.Context, name, arguments string) (output string, isError bool, err error)
}

// Sandbox supplies the completion's sandbox, created on first use.
type Sandbox interface {
	// ID returns the sandbox id, creating the sandbox when needed.
	ID(ctx context.Context) (string, error)
}

// Config is one completion's loop.
type Config struct {
	Provider upstream.Provider
	Executor executorv1.ExecutorServiceClient
	Sandbox  Sandbox
	// Shell is nil when the completion has no shell tool.
	Shell *Shell
	// Editor offers the file editor (EditorTool) beside the shell.
	Editor bool
	// Pause is how long a command of a completion without a stream may
	// wait for an approval before the loop parks it and pauses; Parker
	// keeps what was parked and resumes it (pause.go). Zero, or no
	// Parker: a command waits as long as its approval does.
	Pause  time.Duration
	Parker Parker
	// abort ends the loop with an error rather than a tool result.
	abort error
	// sandbox is the sandbox's id once the loop has it.
	sandbox string
	// egress holds the connections the running command reported, until
	// takeEgress moves them into the result.
	egress        []EgressConnection
	egressOmitted int
	// Exec says for whom and under which policy commands run.
	Exec ExecContext
	// Tools runs the server tools offered to the model directly (webhooks,
	// MCP tools, built-ins); Direct names them.
	Tools  ServerTools
	Direct map[string]bool
	// ExecOutput is the output limit of the exec tool; 0 when the exec and
	// process tools are not offered.
	ExecOutput int32
	// Skills are the gateway's skills by name, for read_skill.
	Skills        map[string]string
	MaxIterations int
	Logger        *slog.Logger
}

// Events receives what a streaming client sees.
type Events interface {
	// Delta is text content as it arrives. A model turn after the first
	// always follows a Tool event, so a front end knows where one turn's
	// text ends and the next begins.
	Delta(text string) error
	// KeepAlive is called periodically while a tool runs.
	KeepAlive() error
	// Tool reports a server tool call starting, waiting for approval, or
	// ending.
	Tool(ev ToolEvent) error
}

// ToolEvent is a step of a server tool call, for streaming clients such as
// conch chat.
type ToolEvent struct {
	Event     string `json:"event"` // tool_call, approval_pending, tool_output, tool_result
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Result    string `json:"result,omitempty"`
	// Approval is the pending approval (REST JSON) for approval_pending.
	Approval json.RawMessage `json:"approval,omitempty"`
	// Sandbox is the sandbox a shell call ran in, on its tool_result.
	Sandbox string `json:"sandbox,omitempty"`
	// Stream ("stdout" or "stderr"), Output and Encoding are a piece of a
	// running command's output, for tool_output: UTF-8 text, or base64
	// with Encoding "base64" for bytes that are not.
	Stream   string `json:"stream,omitempty"`
	Output   string `json:"output,omitempty"`
	Encoding string `json:"encoding,omitempty"`
}

// ServerToolCall is one server tool call and its result, as reported in the
// response's conch.server_tool_calls.
type ServerToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Result    string `json:"result"`
}

// EgressConnection is one connection of the sandbox through conch's
// egress proxy, as reported in the response's conch.egress.
type EgressConnection struct {
	Host          string `json:"host"`
	Port          int    `json:"port"`
	Address       string `json:"address,omitempty"`
	Decision      string `json:"decision"`
	Reason        string `json:"reason,omitempty"`
	BytesSent     int64  `json:"bytes_sent"`
	BytesReceived int64  `json:"bytes_received"`
	DurationMs    int64  `json:"duration_ms"`
}

// takeEgress moves the connections the last command reported into res,
// which keeps them within the bounds of one report for the whole
// completion (egress.Report): no command's refusals push a later
// command's delivery out.
func (cfg *Config) takeEgress(res *Result) {
	for _, c := range cfg.egress {
		res.egress.Add(c, c.Decision == "allowed")
	}
	res.egress.Omit(cfg.egressOmitted)
	res.Egress, res.EgressOmitted = res.egress.Kept(), res.egress.Omitted()
	cfg.egress, cfg.egressOmitted = nil, 0
}

// Result is the outcome of a completion's loop.
type Result struct {
	ID              string
	Content         string
	ToolCalls       []upstream.ToolCall // client tool calls to return
	FinishReason    string
	Usage           upstream.Usage
	ShellCommands   int
	ServerToolCalls []ServerToolCall
	// Egress are the sandbox's connections that ended while the
	// completion's commands ran, as egress.Report keeps them;
	// EgressOmitted counts exactly those left out, here and by the
	// executor.
	Egress        []EgressConnection
	EgressOmitted int
	egress        egress.Report[EgressConnection]
	// Turn are the messages the loop added to the conversation, in order:
	// its assistant turns with every tool call, the server tools'
	// results, and the final answer (or the loop limit's notice) as the
	// last assistant message when it did not end on client tool calls.
	Turn []upstream.Message
}

// Answers are what a front end needs to render the turn: the ids of the
// client's calls it ended on, and each server call's result by call id.
func (r *Result) Answers() (client map[string]bool, results map[string]string) {
	client, results = map[string]bool{}, map[string]string{}
	for _, c := range r.ToolCalls {
		client[c.ID] = true
	}
	for _, m := range r.Turn {
		if m.Role == "tool" {
			results[m.ToolCallID] = m.Content
		}
	}
	return client, results
}

// Run runs the loop on req. ev is nil for a non-streaming completion.
func Run(ctx context.Context, cfg Config, req *upstream.Request, ev Events) (*Result, error) {
	if cfg.MaxIterations <= 0 {
		cfg.MaxIterations = DefaultMaxIterations
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	res := &Result{}
	start := len(req.Messages)
	var onDelta func(string) error
	if ev != nil {
		onDelta = ev.Delta
	}
	if cfg.Parker != nil {
		paused, err := cfg.resume(ctx, res, req, ev)
		if err != nil {
			return nil, err
		}
		if paused {
			res.FinishReason, res.Turn = PauseTurn, req.Messages[start:]
			return res, nil
		}
	}
	for iter := 0; iter < cfg.MaxIterations; iter++ {
		resp, err := cfg.Provider.Complete(ctx, req, onDelta)
		if err != nil {
			return nil, err
		}
		res.ID = resp.ID
		res.Usage.Add(resp.Usage)
		if resp.Content != "" {
			if res.Content != "" {
				res.Content += "\n\n"
			}
			res.Content += resp.Content
		}
		if len(resp.ToolCalls) == 0 {
			res.Turn = append(req.Messages[start:len(req.Messages):len(req.Messages)], upstream.Message{Role: "assistant", Content: resp.Content})
			res.FinishReason = resp.FinishReason
			if res.FinishReason == "" || res.FinishReason == "tool_calls" {
				res.FinishReason = "stop"
			}
			return res, nil
		}

		req.Messages = append(req.Messages, upstream.Message{Role: "assistant", Content: resp.Content, ToolCalls: resp.ToolCalls})
		var client []upstream.ToolCall
		for _, call := range resp.ToolCalls {
			if !cfg.isServerTool(call.Name) {
				client = append(client, call)
				continue
			}
			paused, err := cfg.callServer(ctx, res, req, call, ev)
			if err != nil {
				return nil, err
			}
			if paused {
				res.FinishReason, res.Turn = PauseTurn, req.Messages[start:]
				return res, nil
			}
		}
		if len(client) > 0 {
			res.ToolCalls = client
			res.FinishReason = "tool_calls"
			res.Turn = req.Messages[start:]
			return res, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	msg := fmt.Sprintf("Stopped: the model made %d calls without a final answer, the gateway's loop limit.", cfg.MaxIterations)
	if ev != nil {
		if err := ev.Delta(msg); err != nil {
			return nil, err
		}
	}
	res.Turn = append(req.Messages[start:len(req.Messages):len(req.Messages)], upstream.Message{Role: "assistant", Content: msg})
	if res.Content != "" {
		res.Content += "\n\n"
	}
	res.Content += msg
	res.FinishReason = "length"
	return res, nil
}

// sandboxID returns the completion's sandbox. When no executor has room for
// one, the completion ends with that error (a 429 with Retry-After) rather
// than handing the model a failure that is the cluster's, not its own.
func (cfg *Config) sandboxID(ctx context.Context) (string, error) {
	id, err := cfg.Sandbox.ID(ctx)
	if err != nil && errs.KindOf(err) == errs.ResourceExhausted {
		cfg.abort = err
	}
	if err == nil {
		cfg.sandbox = id
	}
	return id, err
}

func (cfg *Config) isServerTool(name string) bool {
	switch {
	case name == "shell":
		return cfg.Shell != nil
	case name == EditorTool:
		return cfg.Editor && cfg.Shell != nil
	case name == "read_skill":
		return len(cfg.Skills) > 0
	case name == "exec" || name == "process":
		return cfg.ExecOutput > 0
	default:
		return cfg.Direct[name]
	}
}

// CallTool runs one call of a server tool cfg offers, outside any model
// turn (for a client that calls conch's tools itself, such as an MCP
// client), and returns the result a model would receive. ev, when set,
// hears the call's steps and keep-alives as a streaming client does.
func CallTool(ctx context.Context, cfg Config, call upstream.ToolCall, ev Events) (result string, ok bool) {
	if !cfg.isServerTool(call.Name) {
		return "", false
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg.runServerTool(ctx, &Result{}, call, ev), true
}

// callServer runs a server call of the model's, parking it when it waits
// too long for an approval (paused), and adds it and its result to res
// and req's conversation.
func (cfg *Config) callServer(ctx context.Context, res *Result, req *upstream.Request, call upstream.ToolCall, ev Events) (paused bool, err error) {
	var result string
	if cfg.pausable(call, ev) {
		if result, paused = cfg.runPausable(ctx, res, call); paused {
			return true, nil
		}
	} else {
		result = cfg.runServerTool(ctx, res, call, ev)
	}
	if cfg.abort != nil {
		return false, cfg.abort
	}
	cfg.answer(res, req, call, result)
	return false, nil
}

// answer adds call and its result to res and req's conversation.
func (cfg *Config) answer(res *Result, req *upstream.Request, call upstream.ToolCall, result string) {
	res.ServerToolCalls = append(res.ServerToolCalls, ServerToolCall{ID: call.ID, Name: call.Name, Arguments: call.Arguments, Result: result})
	req.Messages = append(req.Messages, upstream.Message{Role: "tool", ToolCallID: call.ID, Content: result})
}

// runServerTool runs one server tool call and returns the result the model
// receives, keeping a streaming client alive meanwhile.
func (cfg *Config) runServerTool(ctx context.Context, res *Result, call upstream.ToolCall, ev Events) string {
	if ev == nil {
		return cfg.serverTool(ctx, res, call, nil)
	}
	_ = ev.Tool(ToolEvent{Event: "tool_call", ID: call.ID, Name: call.Name, Arguments: call.Arguments})
	stop := keepAlive(ctx, ev)
	result := cfg.serverTool(ctx, res, call, ev)
	stop()
	done := ToolEvent{Event: "tool_result", ID: call.ID, Name: call.Name, Result: result}
	if call.Name == "shell" {
		done.Sandbox = cfg.sandbox
	}
	_ = ev.Tool(done)
	return result
}

func (cfg *Config) serverTool(ctx context.Context, res *Result, call upstream.ToolCall, ev Events) string {
	switch call.Name {
	case "shell":
		res.ShellCommands++
		defer cfg.takeEgress(res)
		return toolresult.JSON(cfg.runShell(ctx, res.ShellCommands, call, ev))
	case EditorTool:
		res.ShellCommands++
		defer cfg.takeEgress(res)
		return cfg.runEditor(ctx, res.ShellCommands, call, ev)
	case "read_skill":
		return cfg.readSkill(call.Arguments)
	case "exec":
		res.ShellCommands++
		defer cfg.takeEgress(res)
		return cfg.runExec(ctx, call, ev)
	case "process":
		return cfg.runProcess(ctx, call)
	}
	ctx, span := tracer.Start(ctx, "tool "+call.Name)
	defer span.End()
	out, isErr, err := cfg.Tools.Call(ctx, call.Name, call.Arguments)
	switch {
	case err != nil:
		return "Error: " + err.Error()
	case isErr:
		return "Error: " + out
	}
	return out
}

func (cfg *Config) readSkill(arguments string) string {
	var args struct {
		Name string `json:"name"`
	}
	if err := wirejson.Strict([]byte(arguments), &args); err != nil {
		return `Error: arguments must be a JSON object with a string "name"`
	}
	content, ok := cfg.Skills[args.Name]
	if !ok {
		return fmt.Sprintf("Error: no skill named %q", args.Name)
	}
	return content
}

func (cfg *Config) runShell(ctx context.Context, n int, call upstream.ToolCall, ev Events) *executorv1.RunCommandResponse {
	ctx, span := tracer.Start(ctx, "shell")
	defer span.End()
	sh := cfg.Shell
	if sh.MaxUses > 0 && n > sh.MaxUses {
		return toolresult.Error(fmt.Sprintf("shell: max_uses reached (%d commands per completion); this command was not run", sh.MaxUses))
	}
	var args struct {
		Command *string `json:"command"`
	}
	if err := wirejson.Strict([]byte(call.Arguments), &args); err != nil {
		return toolresult.Error(`shell: arguments must be a JSON object with a string "command": ` + err.Error())
	}
	if args.Command == nil {
		return toolresult.Error(`shell: arguments must be a JSON object with a string "command"`)
	}
	run, failed := cfg.command(ctx, call, ev, *args.Command, sh.MaxOutputLength)
	if failed != nil {
		return failed
	}
	return toolresult.FromExec(run.stdout, run.stderr, int(sh.MaxOutputLength), run.finished)
}

// command runs cmd for call in the completion's sandbox as the shell tool
// does: judged by the exec policy, waiting for an approval, under the
// shell's timeout, with output up to maxOutput characters. A command that
// did not run, or did not finish in the foreground, is failed, the result
// the model gets.
func (cfg *Config) command(ctx context.Context, call upstream.ToolCall, ev Events, cmd string, maxOutput int32) (run *execRun, failed *executorv1.RunCommandResponse) {
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int("conch.command.bytes", len(cmd)))
	if len(cmd) > MaxCommandBytes {
		return nil, toolresult.Error(fmt.Sprintf("shell: command is %d bytes; the limit is 1 MiB (%d bytes)", len(cmd), MaxCommandBytes))
	}
	if !utf8.ValidString(cmd) {
		return nil, toolresult.Error("shell: command is not valid UTF-8")
	}
	id, err := cfg.sandboxID(ctx)
	if err != nil {
		return nil, toolresult.Error("sandbox: " + message(err))
	}
	sh := cfg.Shell
	run, err = cfg.exec(ctx, &executorv1.ExecRequest{
		SandboxId:       id,
		Command:         cmd,
		TimeoutSeconds:  sh.TimeoutSeconds,
		MaxOutputLength: maxOutput,
		Workdir:         sh.Workdir,
		Settings:        cfg.Exec.Settings,
		Agent:           cfg.Exec.Agent,
		Session:         cfg.Exec.Session,
		User:            cfg.Exec.User,
	}, call, ev)
	switch {
	case err != nil:
		return nil, toolresult.Error(err.Error())
	case run.backgrounded != "":
		return nil, toolresult.Error("exec: the command moved to the background, which the shell tool does not do")
	}
	return run, nil
}

// execRun is what an Exec stream delivered: output, and how it ended —
// finished, or moved to the background as a process.
type execRun struct {
	stdout, stderr []byte
	processID      string
	finished       *executorv1.Finished
	backgrounded   string
}

// exec runs req on the executor, collecting its output and passing a
// pending approval on to a streaming client. The error is a message for the
// model.
func (cfg *Config) exec(ctx context.Context, req *executorv1.ExecRequest, call upstream.ToolCall, ev Events) (*execRun, error) {
	stream, err := cfg.Executor.Exec(ctx, req)
	if err != nil {
		return nil, errors.New("exec: " + streamMessage(err, false))
	}
	run := &execRun{}
	var live [2]utf8stream.Splitter // stdout, stderr
	output := func(i int, chunks []utf8stream.Chunk) {
		for _, c := range chunks {
			_ = ev.Tool(ToolEvent{Event: "tool_output", ID: call.ID, Name: call.Name, Stream: [2]string{"stdout", "stderr"}[i], Output: c.Data, Encoding: c.Encoding})
		}
	}
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return nil, errors.New("exec: the executor ended the command without an outcome")
		}
		if err != nil {
			return nil, errors.New("exec: " + streamMessage(err, run.processID != ""))
		}
		switch e := msg.GetEvent().(type) {
		case *executorv1.ExecResponse_Started:
			run.processID = e.Started
		case *executorv1.ExecResponse_Output:
			i := 0
			if e.Output.GetStream() == executorv1.StreamName_STREAM_NAME_STDERR {
				i = 1
				run.stderr = append(run.stderr, e.Output.GetData()...)
			} else {
				run.stdout = append(run.stdout, e.Output.GetData()...)
			}
			// A streaming client sees the output as it comes.
			if ev != nil {
				output(i, live[i].Split(e.Output.GetData()))
			}
		case *executorv1.ExecResponse_ApprovalPending:
			if ev != nil {
				b, _ := restjson.New().Marshal(e.ApprovalPending.GetApproval())
				_ = ev.Tool(ToolEvent{Event: "approval_pending", ID: call.ID, Name: call.Name, Approval: b})
			}
		case *executorv1.ExecResponse_Backgrounded:
			run.backgrounded = e.Backgrounded.GetProcessId()
			return run, nil
		case *executorv1.ExecResponse_Finished:
			if ev != nil {
				output(0, live[0].Flush())
				output(1, live[1].Flush())
			}
			run.finished = e.Finished
			for _, c := range e.Finished.GetEgress() {
				cfg.egress = append(cfg.egress, EgressConnection{
					Host: c.GetHost(), Port: int(c.GetPort()), Address: c.GetAddress(), Decision: c.GetDecision(), Reason: c.GetReason(),
					BytesSent: c.GetBytesSent(), BytesReceived: c.GetBytesReceived(), DurationMs: c.GetDurationMs(),
				})
			}
			cfg.egressOmitted += int(e.Finished.GetEgressOmitted())
			return run, nil
		}
	}
}

// streamMessage is the text of an error that ended an Exec stream. gRPC's
// words for a lost executor ("error reading from server: EOF") would tell
// neither the model nor the user reading its answer what happened, so an
// unavailable executor is named, and so is what became of the command.
func streamMessage(err error, started bool) string {
	if status.Code(err) != codes.Unavailable {
		return message(err)
	}
	msg := message(err)
	switch {
	case started:
		return "the executor running the command went away before it finished, so its outcome is unknown (" + msg + ")"
	case strings.HasPrefix(msg, "the executor holding "):
		return msg // placement's words already say it
	}
	return "the executor holding the sandbox is unavailable (" + msg + ")"
}

// message is the text of an error for the model: a gRPC status's message,
// without the code prefix.
func message(err error) string {
	if s, ok := status.FromError(err); ok {
		return errs.HideAddresses(s.Message())
	}
	return errs.HideAddresses(err.Error())
}

// keepAlive calls ev.KeepAlive every keepAliveEvery until stopped.
func keepAlive(ctx context.Context, ev Events) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(keepAliveEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ev.KeepAlive() != nil {
					return
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
