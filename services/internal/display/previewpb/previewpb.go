// Package previewpb turns an approval's preview, as the approval service
// sends it, into package display's. It is apart from display so that what
// links display alone (the sandbox agent, for Escape) links no protobuf.
package previewpb

import (
	"strings"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/display"
)

// From is p as surfaces show it; nil for none.
func From(p *approvalv1.Preview) *display.Preview {
	if p == nil {
		return nil
	}
	out := &display.Preview{
		ExitCode: int(p.GetExitCode()), TimedOut: p.GetTimedOut(), Stdout: p.GetStdout(), Stderr: p.GetStderr(),
		ChangesOmitted: int(p.GetChangesOmitted()), Error: p.GetError(),
	}
	for _, c := range p.GetChanges() {
		word := strings.ToLower(strings.TrimPrefix(c.GetChange().String(), "PREVIEW_CHANGE_KIND_"))
		out.Changes = append(out.Changes, display.PreviewChange{Path: c.GetPath(), Change: word, SizeBytes: c.GetSizeBytes()})
	}
	return out
}
