package ui

import (
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/display"
)

// The page says what a preview is in the words of every other surface.
func TestPageShowsThePreviewCaveat(t *testing.T) {
	js, err := assets.ReadFile("assets/approvals.js")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `const previewCaveat = "`+display.PreviewCaveat+`";`) {
		t.Error("approvals.js does not carry display.PreviewCaveat as its preview caveat")
	}
	if !strings.Contains(string(js), "if (a.preview) li.appendChild(previewNode(a.preview));") {
		t.Error("approvals.js does not show a pending approval's preview")
	}
}
