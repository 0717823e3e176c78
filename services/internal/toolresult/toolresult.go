// Package toolresult builds the JSON a model receives for a shell command
// (docs/reference/openai-api.md), in one place for the executor's REST answer
// and the router's agent loop: {"stdout", "stderr", "outcome": {"type",
// "exit_code"}} or, for a sandbox or policy failure, an error outcome with
// "error" and no exit code.
package toolresult

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
)

// TruncatedMarker ends an output field that was cut at its limit; it does
// not count towards the limit.
const TruncatedMarker = "[output truncated]"

// Cap applies the shell's output limit (docs/reference/openai-api.md) to a
// command's output: stdout keeps at most limit characters and stderr at
// most what stdout left (invalid UTF-8 counts a replacement character per
// byte); a field that was cut, or that the producer already cut
// (stdoutOver, stderrOver), ends with TruncatedMarker.
func Cap(stdout, stderr string, limit int, stdoutOver, stderrOver bool) (out, errOut string, outCut, errCut bool) {
	out, c := Cut(stdout, limit)
	outCut = stdoutOver || c
	errOut, c = Cut(stderr, limit-utf8.RuneCountInString(out))
	errCut = stderrOver || c
	return mark(out, outCut), mark(errOut, errCut), outCut, errCut
}

// Cut returns the first n characters of s (invalid bytes count as one
// replacement character each) and whether anything was left out.
func Cut(s string, n int) (string, bool) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	i := 0
	for k := 0; k < n; k++ {
		if i >= len(s) {
			return s, false
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i], i < len(s)
}

// mark ends a cut field with the marker, on a line of its own.
func mark(s string, truncated bool) string {
	if !truncated {
		return s
	}
	if s == "" || strings.HasSuffix(s, "\n") {
		return s + TruncatedMarker
	}
	return s + "\n" + TruncatedMarker
}

// FromExec builds the result of a command from its output as streamed, the
// output limit in characters, and its Finished event.
func FromExec(stdout, stderr []byte, limit int, fin *executorv1.Finished) *executorv1.RunCommandResponse {
	out, errOut, _, _ := Cap(string(stdout), string(stderr), limit, fin.GetStdoutTruncated(), fin.GetStderrTruncated())
	r := &executorv1.RunCommandResponse{Stdout: out, Stderr: errOut, Outcome: fin.GetOutcome()}
	if fin.GetOutcome().GetType() == executorv1.OutcomeType_OUTCOME_TYPE_ERROR {
		r.Stdout, r.Stderr = "", ""
		r.Outcome = &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_ERROR}
		r.Error = proto.String(fin.GetError())
	}
	return r
}

// Error is the result of a command that could not run.
func Error(msg string) *executorv1.RunCommandResponse {
	return &executorv1.RunCommandResponse{
		Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_ERROR},
		Error:   proto.String(msg),
	}
}

// Decoded is a result as its JSON reads: what the front ends that show a
// command's outcome in their own shapes, and the scripted model, decode.
type Decoded struct {
	Stdout  string `json:"stdout"`
	Stderr  string `json:"stderr"`
	Error   string `json:"error"`
	Outcome struct {
		Type     string `json:"type"`
		ExitCode *int   `json:"exit_code"`
	} `json:"outcome"`
}

// Decode reads a result's JSON.
func Decode(result string) (Decoded, error) {
	var d Decoded
	err := json.Unmarshal([]byte(result), &d)
	return d, err
}

// ExitCode is an exit outcome's code, 0 when it gives none.
func (d Decoded) ExitCode() int {
	if d.Outcome.ExitCode == nil {
		return 0
	}
	return *d.Outcome.ExitCode
}

// JSON encodes a result as the model receives it.
func JSON(r *executorv1.RunCommandResponse) string {
	b, err := restjson.New().Marshal(r)
	if err != nil {
		// Marshalling a RunCommandResponse cannot fail; keep the model
		// informed all the same.
		return `{"outcome":{"type":"error"},"error":"internal error: encode result"}`
	}
	return string(b)
}
