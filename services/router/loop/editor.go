package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/wirejson"
	"github.com/conch-sh/conch/services/internal/shellquote"
	"github.com/conch-sh/conch/services/router/upstream"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

// EditorTool is the name of the file editor offered beside the shell on
// Anthropic's code execution tool: it views, creates and edits files in
// the sandbox. Each of its operations is a shell command, judged by the
// exec policy, approved and audited as the shell's are: a file it reads is
// one cat, a file it writes one printf, never a way around the policy.
const EditorTool = "text_editor_code_execution"

// EditorResult is the editor's result, which the model receives as JSON
// and Anthropic's front end renders as a text_editor_code_execution
// result block. Type is view, create, str_replace or error.
type EditorResult struct {
	Type string `json:"type"`
	// view
	Content    *string `json:"content,omitempty"`
	FileType   string  `json:"file_type,omitempty"`
	StartLine  *int    `json:"start_line,omitempty"`
	NumLines   *int    `json:"num_lines,omitempty"`
	TotalLines *int    `json:"total_lines,omitempty"`
	// create
	IsFileUpdate *bool `json:"is_file_update,omitempty"`
	// str_replace
	OldStart *int `json:"old_start,omitempty"`
	OldLines *int `json:"old_lines,omitempty"`
	NewStart *int `json:"new_start,omitempty"`
	NewLines *int `json:"new_lines,omitempty"`
	// Lines are the new text's lines.
	Lines []string `json:"lines,omitempty"`
	// error: Anthropic's error codes (invalid_tool_input, unavailable,
	// execution_time_exceeded, file_not_found) and what went wrong.
	ErrorCode    string `json:"error_code,omitempty"`
	ErrorMessage string `json:"error_message,omitempty"`
}

func (r EditorResult) json() string {
	b, _ := json.Marshal(r)
	return string(b)
}

func editorError(code, format string, args ...any) string {
	return EditorResult{Type: "error", ErrorCode: code, ErrorMessage: fmt.Sprintf(format, args...)}.json()
}

// EditorSchema is the editor's input schema, as the model sees it.
const EditorSchema = `{"type":"object","required":["command","path"],"properties":{` +
	`"command":{"type":"string","enum":["view","create","str_replace"]},` +
	`"path":{"type":"string","description":"The file, absolute or relative to the shell's directory."},` +
	`"file_text":{"type":"string","description":"create: the file's whole content."},` +
	`"old_str":{"type":"string","description":"str_replace: the text to replace; it must occur exactly once."},` +
	`"new_str":{"type":"string","description":"str_replace: the text that replaces it."},` +
	`"view_range":{"type":"array","items":{"type":"integer"},"description":"view: the first and last line to show (-1: to the end)."}}}`

// editorArgs are a call's arguments.
type editorArgs struct {
	Command   string  `json:"command"`
	Path      string  `json:"path"`
	FileText  *string `json:"file_text"`
	OldStr    *string `json:"old_str"`
	NewStr    *string `json:"new_str"`
	ViewRange []int   `json:"view_range"`
}

// runEditor runs one call of the editor and returns its result JSON.
func (cfg *Config) runEditor(ctx context.Context, n int, call upstream.ToolCall, ev Events) string {
	ctx, span := tracer.Start(ctx, "editor")
	defer span.End()
	if sh := cfg.Shell; sh.MaxUses > 0 && n > sh.MaxUses {
		return editorError("too_many_requests", "max_uses reached (%d commands per completion); this edit was not made", sh.MaxUses)
	}
	var a editorArgs
	if err := wirejson.Strict([]byte(call.Arguments), &a); err != nil {
		return editorError("invalid_tool_input", "arguments must be a JSON object: %v", err)
	}
	if a.Path == "" {
		return editorError("invalid_tool_input", "path is required")
	}
	switch a.Command {
	case "view":
		return cfg.editorView(ctx, call, ev, a)
	case "create":
		if a.FileText == nil {
			return editorError("invalid_tool_input", "create needs file_text")
		}
		existed, res := cfg.editorExists(ctx, call, ev, a.Path)
		if res != "" {
			return res
		}
		if res := cfg.editorWrite(ctx, call, ev, a.Path, *a.FileText); res != "" {
			return res
		}
		return EditorResult{Type: "create", IsFileUpdate: &existed}.json()
	case "str_replace":
		if a.OldStr == nil || a.NewStr == nil || *a.OldStr == "" {
			return editorError("invalid_tool_input", "str_replace needs a non-empty old_str and a new_str")
		}
		return cfg.editorReplace(ctx, call, ev, a)
	}
	return editorError("invalid_tool_input", "command must be view, create or str_replace, got %q", a.Command)
}

// editorRun runs cmd and returns its stdout, or the editor's error result
// when it did not run or exited non-zero (a missing file is
// file_not_found).
func (cfg *Config) editorRun(ctx context.Context, call upstream.ToolCall, ev Events, cmd string) (stdout string, exit int, failed string) {
	run, bad := cfg.command(ctx, call, ev, cmd, contract.MaxOutputLength)
	if bad != nil {
		return "", 0, editorError("unavailable", "%s", bad.GetError())
	}
	fin := run.finished
	switch fin.GetOutcome().GetType() {
	case executorv1.OutcomeType_OUTCOME_TYPE_EXIT:
	case executorv1.OutcomeType_OUTCOME_TYPE_TIMEOUT:
		return "", 0, editorError("execution_time_exceeded", "the command timed out")
	default:
		return "", 0, editorError("unavailable", "%s", fin.GetError())
	}
	if fin.GetStdoutTruncated() {
		return "", 0, editorError("invalid_tool_input", "the file is larger than %d bytes, more than the editor reads; use the shell", contract.MaxOutputLength)
	}
	return string(run.stdout), int(fin.GetOutcome().GetExitCode()), ""
}

// editorRead reads path with cat.
func (cfg *Config) editorRead(ctx context.Context, call upstream.ToolCall, ev Events, path string) (string, string) {
	q := shellquote.Quote(path)
	out, exit, failed := cfg.editorRun(ctx, call, ev, "cat -- "+q)
	if failed != "" {
		return "", failed
	}
	if exit != 0 {
		return "", editorError("file_not_found", "cannot read %s", path)
	}
	return out, ""
}

// editorExists reports whether path exists, with test -e.
func (cfg *Config) editorExists(ctx context.Context, call upstream.ToolCall, ev Events, path string) (bool, string) {
	_, exit, failed := cfg.editorRun(ctx, call, ev, "test -e "+shellquote.Quote(path))
	return exit == 0, failed
}

// editorWrite writes content to path with printf, exactly: no newline is
// added.
func (cfg *Config) editorWrite(ctx context.Context, call upstream.ToolCall, ev Events, path, content string) string {
	_, exit, failed := cfg.editorRun(ctx, call, ev, "printf '%s' "+shellquote.Quote(content)+" > "+shellquote.Quote(path))
	if failed != "" {
		return failed
	}
	if exit != 0 {
		return editorError("invalid_tool_input", "cannot write %s", path)
	}
	return ""
}

func (cfg *Config) editorView(ctx context.Context, call upstream.ToolCall, ev Events, a editorArgs) string {
	text, failed := cfg.editorRead(ctx, call, ev, a.Path)
	if failed != "" {
		return failed
	}
	lines := splitLines(text)
	first, last := 1, len(lines)
	if len(a.ViewRange) != 0 {
		if len(a.ViewRange) != 2 || a.ViewRange[0] < 1 || a.ViewRange[0] > max(len(lines), 1) || (a.ViewRange[1] != -1 && a.ViewRange[1] < a.ViewRange[0]) {
			return editorError("invalid_tool_input", "view_range must be [first, last] within the file's %d lines (last -1: to the end)", len(lines))
		}
		first = a.ViewRange[0]
		if a.ViewRange[1] != -1 {
			last = min(a.ViewRange[1], len(lines))
		}
	}
	shown := strings.Join(lines[min(first-1, len(lines)):last], "\n")
	num, total := max(last-first+1, 0), len(lines)
	return EditorResult{Type: "view", Content: &shown, FileType: "text", StartLine: &first, NumLines: &num, TotalLines: &total}.json()
}

func (cfg *Config) editorReplace(ctx context.Context, call upstream.ToolCall, ev Events, a editorArgs) string {
	text, failed := cfg.editorRead(ctx, call, ev, a.Path)
	if failed != "" {
		return failed
	}
	switch n := strings.Count(text, *a.OldStr); n {
	case 0:
		return editorError("invalid_tool_input", "old_str does not occur in %s", a.Path)
	case 1:
	default:
		return editorError("invalid_tool_input", "old_str occurs %d times in %s; give more context so that it occurs once", n, a.Path)
	}
	at := strings.Index(text, *a.OldStr)
	if failed := cfg.editorWrite(ctx, call, ev, a.Path, text[:at]+*a.NewStr+text[at+len(*a.OldStr):]); failed != "" {
		return failed
	}
	start := strings.Count(text[:at], "\n") + 1
	lines := splitLines(*a.NewStr)
	oldLines, newLines := len(splitLines(*a.OldStr)), len(lines)
	return EditorResult{Type: "str_replace", OldStart: &start, OldLines: &oldLines, NewStart: &start, NewLines: &newLines, Lines: lines}.json()
}

// splitLines splits text into its lines; a last line without a newline is
// a line too.
func splitLines(text string) []string {
	if text == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n")
}
