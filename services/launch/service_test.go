package launch

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// A failed build frees what it opened, last opened first, and leaves no
// listener behind.
func TestBuildFailureClosesInReverse(t *testing.T) {
	t.Parallel()
	var closed []string
	boom := errors.New("boom")
	var lisAddr string
	_, err := (&process{}).build(t.Context(), "workspace", "127.0.0.1:0", "", func(_ context.Context, _ *process, c *component) error {
		lisAddr = c.lis.Addr().String()
		if c.addr != lisAddr {
			t.Errorf("addr = %q, want the listener's %q", c.addr, lisAddr)
		}
		c.onClose(func() { closed = append(closed, "store") })
		c.onClose(func() { closed = append(closed, "conn") })
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("build: %v, want %v", err, boom)
	}
	if want := []string{"conn", "store"}; !slices.Equal(closed, want) {
		t.Fatalf("closed %v, want %v", closed, want)
	}
	// The listener is closed: its port can be listened on again.
	lis, _, err := listen("workspace", lisAddr, "")
	if err != nil {
		t.Fatalf("listener left open: %v", err)
	}
	_ = lis.Close()
}
