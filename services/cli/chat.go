package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"
	"unicode"

	"github.com/conch-sh/conch/services/internal/display"
	"github.com/conch-sh/conch/services/internal/toolresult"
)

const chatUsage = `usage: conch chat [flags]

Chat with a gateway in the terminal: each shell command and its output is
shown as it runs, approvals pending for the session are asked inline, and
the answer streams. The conversation is one session, so the sandbox (files,
working directory) persists between turns. Ctrl-C cancels the turn or
command under way and gives the prompt back; Ctrl-C twice at the prompt
(exit code 130), Ctrl-D or /quit leave.

With -o json, each turn's answer is printed as the chat.completion object
of the API (choices, usage, conch.server_tool_calls), one per turn,
instead of streaming it; prompts go to stderr, and approvals are not asked
inline (answer them with conch approvals).

conch chat offers the model no client tools. When the model still ends its
turn on a call to one (finish_reason "tool_calls"), each call is shown as
  [client tool call NAME ARGUMENTS not run: conch chat has no client tools]
`

var chatGroup = &group{
	name:    "chat",
	summary: "chat with a gateway in the terminal, commands and approvals shown as they happen",
	usage:   chatUsage,
	flags:   func(string) *flag.FlagSet { return new(chatFlags).flagSet("") },
}

// chatFlags are the values of conch chat's flags.
type chatFlags struct {
	Options
	model, user, session, message string
	shell                         bool
}

// flagSet is conch chat's flag set, bound to f: what the command parses
// and what its help lists. A command alone, it has no commands to tell
// apart.
func (f *chatFlags) flagSet(string) *flag.FlagSet {
	fs := f.newFlagSet("conch chat")
	fs.StringVar(&f.model, "model", "default", "the `GATEWAY` to talk to")
	fs.StringVar(&f.user, "user", "", "the end `USER`, for a persistent workspace")
	fs.StringVar(&f.session, "session", "", "session `ID` to go on with (default: a new one, which ends with the chat)")
	fs.BoolVar(&f.shell, "shell", false, "ask for the shell tool even if the gateway does not add it")
	fs.StringVar(&f.message, "m", "", "send `TEXT` as the one message, print the answer and exit")
	return fs
}

// Chat runs `conch chat`.
func Chat(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var f chatFlags
	if _, _, err := chatGroup.parse(stdout, args, f.flagSet); err != nil {
		return err
	}
	c, err := NewClient(&f.Options)
	if err != nil {
		return err
	}
	// With -o json, stdout carries only the answers' JSON; what is said
	// to the person at the terminal goes to stderr.
	info := stdout
	if f.JSON() {
		info = stderr
	}
	if f.session == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		f.session = "chat-" + hex.EncodeToString(b)
		// A session this chat made up ends with it: nobody can come back
		// to it, so its sandbox would only wait out its idle timeout.
		defer endSession(context.WithoutCancel(ctx), c, f.session, info)
	}
	c.Header.Set("X-Conch-Session-Id", f.session)
	// Ctrl-C belongs to the turn under way, not to the process: conch's
	// main leaves SIGINT to chat (see stopSignals there).
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)
	ch := &chat{c: c, in: readLines(stdin), out: stdout, json: f.JSON(), model: f.model, user: f.user, shell: f.shell, interrupts: interrupts}
	if f.message != "" {
		return ch.interruptibleTurn(ctx, f.message)
	}
	fmt.Fprintf(info, "conch chat with %q (session %s). /quit or Ctrl-D to leave.\n", f.model, f.session)
	// armed is set by a Ctrl-C at the prompt: a second one leaves.
	armed := false
	for {
		fmt.Fprint(info, "\nyou> ")
		var in string
		var more bool
		select {
		case in, more = <-ch.in:
		case <-interrupts:
			if armed {
				fmt.Fprintln(info)
				return ErrInterrupted
			}
			armed = true
			fmt.Fprint(info, "\n(Ctrl-C again or Ctrl-D to leave)")
			continue
		case <-ctx.Done():
			fmt.Fprintln(info)
			return ctx.Err()
		}
		armed = false
		line := strings.TrimSpace(in)
		if line == "/quit" || (!more && line == "") {
			fmt.Fprintln(info)
			return nil
		}
		if line == "" {
			continue
		}
		switch err := ch.interruptibleTurn(ctx, line); {
		case errors.Is(err, ErrInterrupted):
			fmt.Fprintln(info, "\n[interrupted]")
		case err != nil:
			fmt.Fprintf(info, "\nerror: %v\n", err)
		}
	}
}

// interruptibleTurn is turn, cancelled by a Ctrl-C: the request ends (and
// with it the command it runs), the turn is forgotten, and the chat goes
// on.
func (ch *chat) interruptibleTurn(ctx context.Context, text string) error {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ch.turn(tctx, text) }()
	select {
	case err := <-done:
		return err
	case <-ch.interrupts:
		cancel()
		<-done
		return ErrInterrupted
	}
}

type chat struct {
	c *Client
	// in yields the lines the user types; it is closed at the end of
	// the input. One reader serves the chat prompt and the approval
	// prompt alike, so a prompt given up (an approval answered
	// elsewhere) leaves no read behind to steal the next line.
	in  <-chan string
	out io.Writer
	// json prints each answer as the API's completion object (-o json).
	json    bool
	model   string
	user    string
	shell   bool
	history []map[string]any
	// interrupts yields a Ctrl-C, which cancels the turn under way.
	interrupts <-chan os.Signal
	// live says the running call's output was shown as it came, and
	// midLine that the last piece shown ended inside a line.
	live, midLine bool
}

// turn sends one user message and shows the answer: streamed as it
// comes, or with -o json as the completion object once it is complete.
func (ch *chat) turn(ctx context.Context, text string) error {
	ch.history = append(ch.history, map[string]any{"role": "user", "content": text})
	body := map[string]any{"model": ch.model, "messages": ch.history, "stream": !ch.json}
	if ch.user != "" {
		body["user"] = ch.user
	}
	if ch.shell {
		body["tools"] = []any{map[string]any{"type": "shell"}}
	}
	var answer string
	var err error
	if ch.json {
		answer, err = ch.complete(ctx, body)
	} else {
		answer, err = ch.stream(ctx, body)
	}
	if err != nil {
		ch.history = ch.history[:len(ch.history)-1]
		return err
	}
	ch.history = append(ch.history, map[string]any{"role": "assistant", "content": answer})
	return nil
}

// complete asks for the whole completion, prints it as JSON and returns
// its text.
func (ch *chat) complete(ctx context.Context, body map[string]any) (string, error) {
	var raw json.RawMessage
	if err := ch.c.JSON(ctx, "POST", "/v1/chat/completions", body, &raw); err != nil {
		return "", err
	}
	if err := PrintJSON(ch.out, raw); err != nil {
		return "", err
	}
	var resp struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return "", fmt.Errorf("POST /v1/chat/completions: decode answer: %w", err)
	}
	if len(resp.Choices) == 0 {
		return "", nil
	}
	return resp.Choices[0].Message.Content, nil
}

// maxToolCalls bounds the client tool calls of one streamed answer.
const maxToolCalls = 1024

// streamedToolCall is a client tool call put together from its chunks.
type streamedToolCall struct {
	name, arguments string
}

// stream asks for a streamed completion, shows it as it comes and returns
// its text.
func (ch *chat) stream(ctx context.Context, body map[string]any) (string, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	req, err := ch.c.Request(ctx, "POST", "/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ch.c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var answer strings.Builder
	var finish string
	var calls []streamedToolCall
	fmt.Fprint(ch.out, "\n")
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						Index    int `json:"index"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Conch *struct {
				Event     string          `json:"event"`
				Arguments string          `json:"arguments"`
				Result    string          `json:"result"`
				Name      string          `json:"name"`
				Approval  json.RawMessage `json:"approval"`
				Output    string          `json:"output"`
				Encoding  string          `json:"encoding"`
			} `json:"conch_event"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			continue
		}
		if chunk.Error != nil {
			return "", fmt.Errorf("%s", chunk.Error.Message)
		}
		if e := chunk.Conch; e != nil {
			switch e.Event {
			case "tool_call":
				ch.showCall(e.Name, e.Arguments)
			case "approval_pending":
				ch.askApproval(ctx, e.Approval)
			case "tool_output":
				if e.Encoding == "" {
					ch.showOutput(e.Output)
				}
			case "tool_result":
				ch.showResult(e.Result)
			}
			continue
		}
		for _, c := range chunk.Choices {
			answer.WriteString(c.Delta.Content)
			fmt.Fprint(ch.out, Sanitize(c.Delta.Content))
			// A call comes in pieces, by index: its name once, its
			// arguments as fragments to join. An index no real answer
			// reaches is dropped rather than allocated.
			for _, tc := range c.Delta.ToolCalls {
				if tc.Index < 0 || tc.Index >= maxToolCalls {
					continue
				}
				for len(calls) <= tc.Index {
					calls = append(calls, streamedToolCall{})
				}
				calls[tc.Index].name += tc.Function.Name
				calls[tc.Index].arguments += tc.Function.Arguments
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	fmt.Fprintln(ch.out)
	if err := sc.Err(); err != nil {
		return "", err
	}
	if finish == "tool_calls" {
		ch.showClientCalls(calls)
	}
	return answer.String(), nil
}

// showClientCalls says which client tool calls the model ended its turn
// on: conch chat runs none, and printing nothing would look like a hang
// or an empty answer.
func (ch *chat) showClientCalls(calls []streamedToolCall) {
	for _, c := range calls {
		fmt.Fprintf(ch.out, "[client tool call %s %s not run: conch chat has no client tools]\n", display.Escape(c.name), display.Escape(c.arguments))
	}
	if len(calls) == 0 {
		fmt.Fprintln(ch.out, "[the model ended its turn on a client tool call, which conch chat does not run]")
	}
}

func (ch *chat) showCall(name, arguments string) {
	if name != "shell" {
		fmt.Fprintf(ch.out, "[%s %s]\n", Sanitize(name), Sanitize(arguments))
		return
	}
	var a struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal([]byte(arguments), &a)
	fmt.Fprintf(ch.out, "$ %s\n", display.Escape(a.Command))
}

// showOutput shows a piece of the running call's output as it comes,
// indented as its result would be.
func (ch *chat) showOutput(text string) {
	text = Sanitize(text)
	if text == "" {
		return
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		if line == "" {
			continue
		}
		if !ch.midLine {
			b.WriteString("  ")
		}
		b.WriteString(line)
		ch.midLine = !strings.HasSuffix(line, "\n")
	}
	fmt.Fprint(ch.out, b.String())
	ch.live = true
}

func (ch *chat) showResult(result string) {
	live := ch.live
	if ch.midLine {
		fmt.Fprintln(ch.out)
	}
	ch.live, ch.midLine = false, false
	r, err := toolresult.Decode(result)
	if err != nil || r.Outcome.Type == "" {
		fmt.Fprintf(ch.out, "%s\n", Sanitize(firstChars(result, 2000)))
		return
	}
	// Output already shown as it came is not shown twice.
	if r.Stdout != "" && !live {
		fmt.Fprint(ch.out, indent(Sanitize(r.Stdout)))
	}
	if r.Stderr != "" && !live {
		fmt.Fprint(ch.out, indent(Sanitize(r.Stderr)))
	}
	switch {
	case r.Outcome.Type == "error":
		fmt.Fprintf(ch.out, "  [error: %s]\n", Sanitize(r.Error))
	case r.Outcome.Type == "timeout":
		fmt.Fprintln(ch.out, "  [timed out]")
	case r.ExitCode() != 0:
		fmt.Fprintf(ch.out, "  [exit %d]\n", r.ExitCode())
	}
	fmt.Fprintln(ch.out)
}

// askApproval shows a pending approval and sends the user's decision.
func (ch *chat) askApproval(ctx context.Context, raw json.RawMessage) {
	var a struct {
		ID            string      `json:"id"`
		Command       string      `json:"command"`
		Cwd           string      `json:"cwd"`
		ResolvedPaths []string    `json:"resolved_paths"`
		Host          string      `json:"host"`
		Security      string      `json:"security"`
		Preview       *apiPreview `json:"preview"`
	}
	if json.Unmarshal(raw, &a) != nil || a.ID == "" {
		return
	}
	// Escaped as on every other surface that asks a human: what is shown
	// is what would run.
	fmt.Fprintf(ch.out, "  approval needed (%s): %s\n    cwd %s, host %s, security %s, runs %s\n",
		display.Escape(a.ID), display.Escape(a.Command), display.Escape(a.Cwd), display.Escape(a.Host), display.Escape(a.Security),
		display.Escape(strings.Join(a.ResolvedPaths, ", ")))
	for _, l := range a.Preview.lines() {
		fmt.Fprintln(ch.out, "    "+l)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	elsewhere := ch.watchApproval(wctx, a.ID)
	for {
		fmt.Fprint(ch.out, "  allow [o]nce, for this [s]ession, [a]lways, or [d]eny? ")
		var line string
		var more bool
		select {
		case line, more = <-ch.in:
		case st := <-elsewhere:
			fmt.Fprintf(ch.out, "\n  answered elsewhere: %s by %s\n", display.Escape(st.State), display.Escape(st.ResolvedBy))
			return
		case <-ctx.Done():
			return
		}
		decision := map[string]string{"o": "allow-once", "s": "allow-session", "a": "allow-always", "d": "deny"}[strings.TrimSpace(strings.ToLower(line))]
		if !more && decision == "" {
			fmt.Fprintln(ch.out, "\n  no answer; the approval waits for another approver or its timeout")
			return
		}
		if decision == "" {
			continue
		}
		var out map[string]any
		if err := ch.c.JSON(ctx, "POST", "/api/v1/approvals/"+url.PathEscape(a.ID)+":resolve", map[string]string{"decision": decision}, &out); err != nil {
			fmt.Fprintf(ch.out, "  %v\n", err)
			return
		}
		fmt.Fprintf(ch.out, "  %s\n", decision)
		return
	}
}

// approvalState is an approval's state as the REST API gives it.
type approvalState struct {
	State      string `json:"state"`
	ResolvedBy string `json:"resolved_by"`
}

// approvalPoll is how often a prompt for an approval checks whether it
// was answered elsewhere (another terminal, the web page, a chat).
const approvalPoll = 500 * time.Millisecond

// watchApproval yields the approval's state once it is no longer pending,
// until ctx ends. A failed read is tried again at the next tick: the
// prompt stays usable whatever the watch does.
func (ch *chat) watchApproval(ctx context.Context, id string) <-chan approvalState {
	done := make(chan approvalState, 1)
	go func() {
		t := time.NewTicker(approvalPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var st approvalState
			if ch.c.JSON(ctx, "GET", "/api/v1/approvals/"+url.PathEscape(id), nil, &st) == nil && st.State != "" && st.State != "pending" {
				done <- st
				return
			}
		}
	}()
	return done
}

// readLines reads r line by line into the channel it returns, closed at
// the end of r.
func readLines(r io.Reader) <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	return lines
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

func firstChars(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// Sanitize makes text safe to print on a terminal: control characters
// (other than newline and tab) and bidirectional overrides are shown as
// escapes instead of acting on the terminal.
func Sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, "\\x%02x", r)
		case unicode.Is(unicode.Bidi_Control, r) || r == 0x2028 || r == 0x2029:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// endSession destroys the sandboxes of session, telling out when one
// could not be.
func endSession(ctx context.Context, c *Client, session string, out io.Writer) {
	var list struct {
		Sandboxes []struct {
			ID      string `json:"id"`
			Session string `json:"session"`
		} `json:"sandboxes"`
	}
	if err := c.JSON(ctx, "GET", "/api/v1/sandboxes", nil, &list); err != nil {
		fmt.Fprintf(out, "conch chat: could not end session %s: %v\n", session, err)
		return
	}
	for _, sb := range list.Sandboxes {
		if sb.Session != session {
			continue
		}
		if err := c.JSON(ctx, "DELETE", "/api/v1/sandboxes/"+sb.ID, nil, nil); err != nil {
			fmt.Fprintf(out, "conch chat: could not end sandbox %s of session %s: %v\n", sb.ID, session, err)
		}
	}
}
