package shellquote

import (
	"os/exec"
	"testing"
)

// What the shell reads back is the string, byte for byte.
func TestQuoteReadsBack(t *testing.T) {
	cases := []string{
		"", "plain", "it's", "''", "'", `\`, `a\'b`, "$HOME `id` $(id) ${x}", "two\nlines", "tab\there",
		"*?[a]", "~root", "#not a comment", "; rm -rf /", "olá ☃", "\xff\xfe invalid", " lead and trail ",
	}
	for _, s := range cases {
		out, err := exec.Command("/bin/sh", "-c", `printf %s `+Quote(s)).Output()
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if string(out) != s {
			t.Errorf("%q read back as %q", s, out)
		}
	}
}
