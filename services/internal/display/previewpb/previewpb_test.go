package previewpb

import (
	"strings"
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/display"
)

func TestPreviewLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *approvalv1.Preview
		want []string
	}{
		{"changes and output", &approvalv1.Preview{ExitCode: 2, Stdout: "hi\n", Stderr: "\x1b[31merr", Changes: []*approvalv1.PreviewChange{
			{Path: "/home/workspace/a\nb", Change: approvalv1.PreviewChangeKind_PREVIEW_CHANGE_KIND_CREATED, SizeBytes: 3},
			{Path: "/tmp/x", Change: approvalv1.PreviewChangeKind_PREVIEW_CHANGE_KIND_DELETED},
		}, ChangesOmitted: 4}, []string{
			"Preview (" + display.PreviewCaveat + "):", "  exit code 2", `  stdout: hi\n`, `  stderr: \x1b[31merr`,
			`  created /home/workspace/a\nb (3 bytes)`, "  deleted /tmp/x (0 bytes)", "  and 4 more changes",
		}},
		{"nothing changed", &approvalv1.Preview{}, []string{"Preview (" + display.PreviewCaveat + "):", "  exit code 0", "  no file changed in /home/workspace or /tmp"}},
		{"timed out", &approvalv1.Preview{ExitCode: 137, TimedOut: true}, []string{"Preview (" + display.PreviewCaveat + "):", "  stopped at the preview's time limit", "  no file changed in /home/workspace or /tmp"}},
		{"no preview", &approvalv1.Preview{ExitCode: -1, Error: "no copy of the sandbox could be made: quota sandboxes exceeded (20 of 20)"}, []string{"Preview (" + display.PreviewCaveat + "):", "  no copy of the sandbox could be made: quota sandboxes exceeded (20 of 20)"}},
	} {
		if got := From(tc.p).Lines(); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s:\n%s\nwant:\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
	if From(nil) != nil {
		t.Error("no preview shows something")
	}
}
