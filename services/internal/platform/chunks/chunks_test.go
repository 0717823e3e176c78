package chunks

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
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

// TestPoolFitsFileMessages checks that a streamed message of Size bytes
// of content takes a pooled buffer near its size, not the next tier of
// 1 MiB that gRPC would clear whole for every message, and that the pool
// is gRPC's default, which its codec marshals and unmarshals with.
func TestPoolFitsFileMessages(t *testing.T) {
	t.Parallel()
	if mem.DefaultBufferPool() != pool {
		t.Fatal("gRPC's default buffer pool is not this package's")
	}
	data := make([]byte, Size)
	for _, m := range []proto.Message{
		&workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: data}},
		&workspacev1.ReadFileResponse{Data: data},
		&executorv1.WriteFileRequest{Data: data},
		&executorv1.ReadFileResponse{Data: data},
	} {
		n := proto.Size(m)
		buf := pool.Get(n)
		if c := cap(*buf); c < n || c >= 2*Size {
			t.Errorf("%T of %d bytes got a pooled buffer of %d", m, n, c)
		}
		pool.Put(buf)
	}
}
