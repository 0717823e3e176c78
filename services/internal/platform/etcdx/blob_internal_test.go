package etcdx

import (
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// TestEncodeBlobRawLimit: a blob larger decoded than its bound is refused
// however well it compresses, so no reader meets one it cannot read.
func TestEncodeBlobRawLimit(t *testing.T) {
	t.Parallel()
	v := map[string]string{"v": strings.Repeat("a", 1000)}
	if _, err := encodeBlob(v, 1<<20, 1100); err != nil {
		t.Fatalf("within both bounds: %v", err)
	}
	_, err := encodeBlob(v, 1<<20, 1000)
	if errs.KindOf(err) != errs.ResourceExhausted || !strings.Contains(err.Error(), "more than the 1000") {
		t.Fatalf("over the decoded bound: %v, want resource exhausted naming it", err)
	}
	// Markup is kept as written, not as escapes that would count six
	// times.
	data, err := encodeBlob(map[string]string{"v": strings.Repeat("<", 1000)}, 1<<20, 1100)
	if err != nil || len(data) == 0 {
		t.Fatalf("markup: %v", err)
	}
}
