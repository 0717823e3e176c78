package display_test

import (
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/display"
	"github.com/conch-sh/conch/services/internal/display/displaytest"
)

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, tc := range displaytest.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			if got := display.Escape(tc.In); got != tc.Want {
				t.Errorf("Escape(%q) = %q, want %q", tc.In, got, tc.Want)
			}
		})
	}
}

// Every code point is either shown as itself or written as an escape of
// printable ASCII, so no character can hide in the rendering.
func TestEscapeShowsEveryCodePoint(t *testing.T) {
	t.Parallel()
	for r := rune(0); r <= 0x10ffff; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue // not encodable in UTF-8
		}
		out := display.Escape(string(r))
		if out == string(r) {
			continue
		}
		if out[0] != '\\' || strings.IndexFunc(out, func(c rune) bool { return c < 0x21 || c > 0x7e }) >= 0 {
			t.Fatalf("U+%04X shown as %q", r, out)
		}
	}
}
