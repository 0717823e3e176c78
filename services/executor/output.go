package executor

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// TruncatedMarker ends an output field that was cut (SPEC §3).
const TruncatedMarker = "[output truncated]"

// capture keeps the first bytes of one stream, enough for limit characters,
// and remembers whether anything beyond was seen.
type capture struct {
	mu       sync.Mutex
	maxBytes int
	b        []byte
	over     bool
}

func newCapture(limitChars int) *capture {
	return &capture{maxBytes: utf8.UTFMax*limitChars + utf8.UTFMax}
}

// budget is how many bytes the agent needs to forward for limit characters.
func budgetFor(limitChars int) int64 { return int64(utf8.UTFMax*limitChars + utf8.UTFMax) }

// write keeps what fits of p and returns how many bytes it kept.
func (c *capture) write(p []byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.maxBytes - len(c.b)
	if len(p) > room {
		p = p[:max(room, 0)]
		c.over = true
	}
	c.b = append(c.b, p...)
	return len(p)
}

// cut returns the first n characters of s (invalid bytes count as one
// replacement character each) and whether anything was left out.
func cut(s string, n int) (string, bool) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	i := 0
	for k := 0; k < n; k++ {
		if i >= len(s) {
			return s, false
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i], i < len(s)
}

// finalOutput applies SPEC §3: stdout keeps at most limit characters, stderr
// at most what stdout left; a cut field ends with TruncatedMarker.
func finalOutput(stdout, stderr *capture, limit int, stdoutDropped, stderrDropped bool) (outS, errS string, outCut, errCut bool) {
	stdout.mu.Lock()
	o := string(stdout.b)
	outCut = stdout.over || stdoutDropped
	stdout.mu.Unlock()
	stderr.mu.Lock()
	e := string(stderr.b)
	errCut = stderr.over || stderrDropped
	stderr.mu.Unlock()

	o, c := cut(o, limit)
	outCut = outCut || c
	e, c = cut(e, limit-utf8.RuneCountInString(o))
	errCut = errCut || c
	return mark(o, outCut), mark(e, errCut), outCut, errCut
}

func mark(s string, truncated bool) string {
	if !truncated {
		return s
	}
	if s == "" || strings.HasSuffix(s, "\n") {
		return s + TruncatedMarker
	}
	return s + "\n" + TruncatedMarker
}
