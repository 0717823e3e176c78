package cli

import (
	"strings"
	"testing"
	"time"
)

// TestAuditFollowKeepsColumns: rows printed later by --follow line up
// with the header printed first, however wide their cells.
func TestAuditFollowKeepsColumns(t *testing.T) {
	o := &Options{}
	var first, later strings.Builder
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	if err := printAudit(&first, o, []apiAuditRecord{{Time: t0, Kind: "command", Gateway: "gw", User: "u", Decision: "allow", Command: "ls"}}, true, true); err != nil {
		t.Fatal(err)
	}
	if err := printAudit(&later, o, []apiAuditRecord{{Time: t0, Kind: "approval resolved", Gateway: "a-much-longer-gateway-name", User: "someone@example.com", Decision: "allow-always", Command: strings.Repeat("x", 80)}}, false, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(first.String()+later.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("lines %q", lines)
	}
	header := lines[0]
	for _, col := range []string{"KIND", "GATEWAY", "USER", "DECISION", "BY", "COMMAND", "DETAIL"} {
		at := strings.Index(header, col)
		for _, row := range lines[1:] {
			r := []rune(row)
			if at >= len(r) || (at > 0 && r[at-1] != ' ') || r[at] == ' ' {
				t.Errorf("column %s at %d: row %q does not start a cell there", col, at, row)
			}
		}
	}
}
