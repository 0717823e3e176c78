package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFrames(t *testing.T) {
	for _, c := range []struct {
		name    string
		typ     byte
		id      uint32
		payload []byte
		limit   uint32
		err     error
	}{
		{"empty", FrameReady, 0, nil, 10, nil},
		{"output", FrameStdout, 7, []byte("hello"), 10, nil},
		{"at the limit", FrameStderr, 1<<32 - 1, bytes.Repeat([]byte{1}, 10), 10, nil},
		{"over the limit", FrameStdout, 1, bytes.Repeat([]byte{1}, 11), 10, ErrFrameTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := NewWriter(&b).Write(c.typ, c.id, c.payload); err != nil {
				t.Fatal(err)
			}
			if b.Len() != FrameHeader+len(c.payload) {
				t.Fatalf("frame of %d bytes, want %d", b.Len(), FrameHeader+len(c.payload))
			}
			f, err := ReadFrame(bufio.NewReader(&b), c.limit)
			if !errors.Is(err, c.err) {
				t.Fatalf("read: %v, want %v", err, c.err)
			}
			if c.err == nil && (f.Type != c.typ || f.ID != c.id || !bytes.Equal(f.Payload, c.payload)) {
				t.Errorf("read %+v", f)
			}
		})
	}
	// A writer refuses what no reader takes; a cut frame is an error.
	if err := NewWriter(io.Discard).Write(FrameStart, 1, make([]byte, MaxFrame+1)); err == nil {
		t.Error("a frame over MaxFrame was written")
	}
	var b bytes.Buffer
	_ = NewWriter(&b).Write(FrameStdout, 1, []byte("whole"))
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(b.Bytes()[:b.Len()-1])), 10); err == nil {
		t.Error("a cut frame was read")
	}
}
