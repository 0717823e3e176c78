package chunks

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestFill(t *testing.T) {
	t.Parallel()
	buf := make([]byte, 4)
	tests := []struct {
		name    string
		r       io.Reader
		n       int
		wantErr error
	}{
		{"a full chunk", strings.NewReader("abcdef"), 4, nil},
		{"a short last chunk ends the body", strings.NewReader("ab"), 2, io.EOF},
		{"one byte at a time", iotest.OneByteReader(strings.NewReader("abcd")), 4, nil},
		{"a cut body", io.MultiReader(strings.NewReader("a"), iotest.ErrReader(io.ErrUnexpectedEOF)), 1, io.ErrUnexpectedEOF},
	}
	for _, tc := range tests {
		n, err := Fill(tc.r, buf)
		if n != tc.n || !errors.Is(err, tc.wantErr) && err != tc.wantErr {
			t.Errorf("%s: %d %v, want %d %v", tc.name, n, err, tc.n, tc.wantErr)
		}
	}
}
