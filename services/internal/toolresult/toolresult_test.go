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
		{"exit 0", FromExec([]byte("hi\n"), nil, 100, &executorv1.Finished{Outcome: exit(0)}),
			`{"outcome":{"exit_code":0,"type":"exit"},"stderr":"","stdout":"hi\n"}`},
		{"cut by the producer", FromExec([]byte("abc"), []byte("e\n"), 100, &executorv1.Finished{Outcome: exit(1), StdoutTruncated: true, StderrTruncated: true}),
			`{"outcome":{"exit_code":1,"type":"exit"},"stderr":"e\n[output truncated]","stdout":"abc\n[output truncated]"}`},
		{"cut here, in characters, stderr gets what stdout left", FromExec([]byte("héllo wörld"), []byte("err"), 7, &executorv1.Finished{Outcome: exit(0)}),
			`{"outcome":{"exit_code":0,"type":"exit"},"stderr":"[output truncated]","stdout":"héllo w\n[output truncated]"}`},
		{"stderr within what is left", FromExec([]byte("abc"), []byte("defgh"), 6, &executorv1.Finished{Outcome: exit(0)}),
			`{"outcome":{"exit_code":0,"type":"exit"},"stderr":"def\n[output truncated]","stdout":"abc"}`},
		{"timeout keeps output, no exit code", FromExec([]byte("partial"), nil, 100, &executorv1.Finished{Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_TIMEOUT}}),
			`{"outcome":{"type":"timeout"},"stderr":"","stdout":"partial"}`},
		{"error from the executor", FromExec(nil, nil, 100, &executorv1.Finished{Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_ERROR, ExitCode: proto.Int32(3)}, Error: "Command not allowed by exec policy"}),
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

func TestCut(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		n    int
		want string
		cut  bool
	}{
		{"hello", 10, "hello", false},
		{"hello", 5, "hello", false},
		{"hello", 3, "hel", true},
		{"☃☃☃", 2, "☃☃", true},
		{"a\xffb", 2, "a\uFFFD", true},
		{"", 0, "", false},
		{"x", 0, "", true},
	}
	for _, c := range cases {
		got, cut := Cut(c.in, c.n)
		if got != c.want || cut != c.cut {
			t.Errorf("Cut(%q, %d) = %q %v, want %q %v", c.in, c.n, got, cut, c.want, c.cut)
		}
	}
}
