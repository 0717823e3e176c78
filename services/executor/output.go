package executor

import (
	"sync"
	"unicode/utf8"

	"github.com/conch-sh/conch/services/internal/toolresult"
)

// capture keeps the first maxBytes bytes of one stream, and remembers
// whether anything beyond was seen.
type capture struct {
	mu       sync.Mutex
	maxBytes int
	b        []byte
	over     bool
}

// newCapture keeps enough of a stream for limit characters.
func newCapture(limitChars int) *capture {
	return &capture{maxBytes: utf8.UTFMax*limitChars + utf8.UTFMax}
}

// head keeps the first n bytes of a stream.
func head(n int) *capture { return &capture{maxBytes: n} }

// String is what it kept.
func (c *capture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.b)
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

// finalOutput applies the shell's output limit (docs/reference/openai-api.md)
// to the captured output.
func finalOutput(stdout, stderr *capture, limit int, stdoutDropped, stderrDropped bool) (outS, errS string, outCut, errCut bool) {
	stdout.mu.Lock()
	o, oOver := string(stdout.b), stdout.over || stdoutDropped
	stdout.mu.Unlock()
	stderr.mu.Lock()
	e, eOver := string(stderr.b), stderr.over || stderrDropped
	stderr.mu.Unlock()
	return toolresult.Cap(o, e, limit, oOver, eOver)
}
