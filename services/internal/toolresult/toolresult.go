// Package toolresult builds the JSON a model receives for a shell command
// (SPEC §3), in one place for the executor's REST answer and the router's
// agent loop: {"stdout", "stderr", "outcome": {"type", "exit_code"}} or, for
// a sandbox or policy failure, an error outcome with "error" and no exit
// code.
package toolresult

import (
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/restjson"
)

// TruncatedMarker ends an output field that was cut at its limit; it does
// not count towards the limit.
const TruncatedMarker = "[output truncated]"

// FromExec builds the result of a command from its collected output and its
// Finished event.
func FromExec(stdout, stderr []byte, fin *executorv1.Finished) *executorv1.RunCommandResponse {
	out, errOut := string(stdout), string(stderr)
	if fin.GetStdoutTruncated() {
		out += TruncatedMarker
	}
	if fin.GetStderrTruncated() {
		errOut += TruncatedMarker
	}
	r := &executorv1.RunCommandResponse{Stdout: out, Stderr: errOut, Outcome: fin.GetOutcome()}
	if fin.GetOutcome().GetType() == executorv1.OutcomeType_OUTCOME_TYPE_ERROR {
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
