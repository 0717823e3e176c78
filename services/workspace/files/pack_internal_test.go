package files

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

func sumOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// A pack yields only content whose bytes hash to the name they are
// stored under, and a damaged pack what precedes the damage.
func TestDecodePackChecksContent(t *testing.T) {
	t.Parallel()
	a, b := []byte("alpha"), []byte("bravo bravo")
	good := encodePack(map[string][]byte{sumOf(a): a, sumOf(b): b})
	forged := encodePack(map[string][]byte{sumOf(a): b})
	want := map[string]bool{sumOf(a): true, sumOf(b): true}
	tests := []struct {
		name string
		pack []byte
		want map[string]string
	}{
		{"whole", good, map[string]string{sumOf(a): "alpha", sumOf(b): "bravo bravo"}},
		{"content under another hash", forged, map[string]string{}},
		{"not a pack", []byte("hello\n"), map[string]string{}},
		{"cut short", good[:len(good)-3], nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decodePack(bytes.NewReader(tt.pack), want)
			if tt.want == nil {
				// Whatever came before the cut, and nothing wrong.
				for sum, data := range got {
					if sumOf(data) != sum {
						t.Errorf("%s: wrong content %q", sum, data)
					}
				}
				if len(got) == 2 {
					t.Errorf("a cut pack yielded both files")
				}
				return
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d files, want %d", len(got), len(tt.want))
			}
			for sum, data := range tt.want {
				if string(got[sum]) != data {
					t.Errorf("%s: got %q, want %q", sum, got[sum], data)
				}
			}
		})
	}
}
