package display

import (
	"fmt"
)

// Preview is an approval's preview as every surface shows it: what the
// command did on a throwaway copy of its sandbox before anyone was asked.
type Preview struct {
	ExitCode       int
	TimedOut       bool
	Stdout, Stderr string
	Changes        []PreviewChange
	ChangesOmitted int
	Error          string
}

// PreviewChange is one changed path: created, modified or deleted.
type PreviewChange struct {
	Path, Change string
	SizeBytes    int64
}

// PreviewCaveat is what every surface says of a preview: it is no promise.
const PreviewCaveat = "what the command did on a copy of the sandbox, without network or secrets; not a promise: time, network and randomness differ when it runs"

// Lines is the preview in plain text, one line each, every tenant-made
// text escaped: the caveat, how the command ended, the heads of its
// output and its changes.
func (p *Preview) Lines() []string {
	lines := []string{"Preview (" + PreviewCaveat + "):"}
	switch {
	case p.TimedOut:
		lines = append(lines, "  stopped at the preview's time limit")
	case p.ExitCode >= 0:
		lines = append(lines, fmt.Sprintf("  exit code %d", p.ExitCode))
	}
	if p.Error != "" {
		lines = append(lines, "  "+Escape(p.Error))
	}
	if p.Stdout != "" {
		lines = append(lines, "  stdout: "+Escape(p.Stdout))
	}
	if p.Stderr != "" {
		lines = append(lines, "  stderr: "+Escape(p.Stderr))
	}
	for _, c := range p.Changes {
		lines = append(lines, fmt.Sprintf("  %s %s (%d bytes)", c.Change, Escape(c.Path), c.SizeBytes))
	}
	if p.ChangesOmitted > 0 {
		lines = append(lines, fmt.Sprintf("  and %d more changes", p.ChangesOmitted))
	}
	if len(p.Changes) == 0 && p.Error == "" {
		lines = append(lines, "  no file changed in /home/workspace or /tmp")
	}
	return lines
}
