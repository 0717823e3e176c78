package toolresult

import (
	"testing"

	"google.golang.org/protobuf/proto"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

func TestJSON(t *testing.T) {
	t.Parallel()
	exit := func(code int32) *executorv1.Outcome {
		return &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: proto.Int32(code)}
	}
	tests := []struct {
		name string
		r    *executorv1.RunCommandResponse
		want string
	}{
		{"exit 0", FromExec([]byte("hi\n"), nil, &executorv1.Finished{Outcome: exit(0)}),
			`{"outcome":{"exit_code":0,"type":"exit"},"stderr":"","stdout":"hi\n"}`},
		{"truncated", FromExec([]byte("abc"), []byte("e"), &executorv1.Finished{Outcome: exit(1), StdoutTruncated: true, StderrTruncated: true}),
			`{"outcome":{"exit_code":1,"type":"exit"},"stderr":"e[output truncated]","stdout":"abc[output truncated]"}`},
		{"timeout keeps output, no exit code", FromExec([]byte("partial"), nil, &executorv1.Finished{Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_TIMEOUT}}),
			`{"outcome":{"type":"timeout"},"stderr":"","stdout":"partial"}`},
		{"error from the executor", FromExec(nil, nil, &executorv1.Finished{Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_ERROR, ExitCode: proto.Int32(3)}, Error: "Command not allowed by exec policy"}),
			`{"error":"Command not allowed by exec policy","outcome":{"type":"error"},"stderr":"","stdout":""}`},
		{"error before running", Error("sandbox unavailable"),
			`{"error":"sandbox unavailable","outcome":{"type":"error"},"stderr":"","stdout":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := JSON(tt.r); got != tt.want {
				t.Errorf("JSON =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
