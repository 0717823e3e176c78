package chunks

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
)

// split cuts b into buffers of at most size bytes, as gRPC hands a
// message over in the frames it arrived in, and returns how many of them
// are pooled (gRPC pools none too small); put counts those freed.
func split(b []byte, size int, put *int) (mem.BufferSlice, int) {
	var s mem.BufferSlice
	pooled := 0
	for len(b) > 0 {
		n := min(size, len(b))
		c := append([]byte(nil), b[:n]...)
		if !mem.IsBelowBufferPoolingThreshold(n) {
			pooled++
		}
		s = append(s, mem.NewBuffer(&c, countingPool{put}))
		b = b[n:]
	}
	return s, pooled
}

type countingPool struct{ put *int }

func (countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p countingPool) Put(*[]byte)     { *p.put++ }

// decode decodes b, in frames of size bytes, into m with Codec, frees the
// frames as gRPC does, and checks that every frame went back to its pool.
func decode(t testing.TB, b []byte, size int, m proto.Message) error {
	t.Helper()
	put := 0
	data, pooled := split(b, size, &put)
	err := Codec{}.Unmarshal(data, m)
	data.Free()
	if put != pooled {
		t.Fatalf("%d of %d pooled buffers freed", put, pooled)
	}
	return err
}

func TestCodecIsRegistered(t *testing.T) {
	t.Parallel()
	if encoding.GetCodecV2(CodecName) == nil {
		t.Fatalf("no codec %q registered", CodecName)
	}
}

// TestCodecDecodesAsProtobuf decodes messages of every shape with Codec,
// into a message that already held content, and with protobuf.
func TestCodecDecodesAsProtobuf(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("0123456789"), 5000)
	size := int64(7)
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	tests := []struct {
		name string
		wire []byte
		into func() proto.Message
	}{
		{"data", marshal(t, &workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: data}}), newWrite},
		{"empty data", marshal(t, &workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: []byte{}}}), newWrite},
		{"a header", marshal(t, &workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Header{Header: &workspacev1.WriteFileHeader{Path: "/a", Size: &size}}}), newWrite},
		{"nothing", nil, newWrite},
		{"data twice, the last wins", append(marshal(t, &workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: []byte("first")}}), marshal(t, &workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: []byte("second")}})...), newWrite},
		{"data then an unknown field", append(marshal(t, &workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: []byte("x")}}), protowire.AppendVarint(tag(99, protowire.VarintType), 1)...), newWrite},
		{"an unknown bytes field", protowire.AppendBytes(tag(99, protowire.BytesType), []byte("x")), newWrite},
		{"data with a length past the end", protowire.AppendVarint(tag(2, protowire.BytesType), 100), newWrite},
		{"data with a length short of the end", append(protowire.AppendVarint(tag(2, protowire.BytesType), 1), "ab"...), newWrite},
		{"a truncated tag", []byte{0x92}, newWrite},
		{"a header of the wrong wire type", protowire.AppendVarint(tag(1, protowire.VarintType), 1), newWrite},
		{"a singular bytes field", marshal(t, wrapperspb.Bytes(data)), func() proto.Message { return wrapperspb.Bytes([]byte("old content")) }},
		{"an empty singular bytes field", protowire.AppendBytes(tag(1, protowire.BytesType), nil), func() proto.Message { return wrapperspb.Bytes([]byte("old content")) }},
	}
	for _, tc := range tests {
		for _, frame := range []int{1, 3, 16 << 10, 1 << 20} {
			want := tc.into()
			wantErr := proto.Unmarshal(tc.wire, want)
			got := tc.into()
			err := decode(t, tc.wire, frame, got)
			if (err == nil) != (wantErr == nil) {
				t.Errorf("%s, frames of %d: error %v, protobuf's %v", tc.name, frame, err, wantErr)
				continue
			}
			if err == nil && !proto.Equal(got, want) {
				t.Errorf("%s, frames of %d: decoded %v, protobuf %v", tc.name, frame, got, want)
			}
		}
	}
}

// newWrite is a message holding content, as a receiver's is between two
// messages of a stream.
func newWrite() proto.Message {
	return &workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: []byte("old content")}}
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCodecReusesTheBuffer receives a stream of data messages into one
// message, as an upload sends them (full ones, then a shorter last), and
// checks that every one but the first lands in the first one's buffer.
func TestCodecReusesTheBuffer(t *testing.T) {
	t.Parallel()
	m := new(workspacev1.WriteFileRequest)
	var first *byte
	for i, content := range []string{"0123456789", "abcdefghij", "xyz"} {
		wire := marshal(t, &workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: []byte(content)}})
		if err := decode(t, wire, 16<<10, m); err != nil {
			t.Fatal(err)
		}
		if got := string(m.GetData()); got != content {
			t.Fatalf("message %d: %q, want %q", i, got, content)
		}
		if i == 0 {
			first = &m.GetData()[0]
		} else if &m.GetData()[0] != first {
			t.Fatalf("message %d: a new buffer", i)
		}
	}
}

// FuzzCodec decodes any bytes with Codec, into a message holding content,
// and with protobuf: both fail, or both decode the same message.
func FuzzCodec(f *testing.F) {
	f.Add(marshal(f, &workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Data{Data: []byte("data")}}), uint8(3))
	f.Add(marshal(f, &workspacev1.WriteFileRequest{Message: &workspacev1.WriteFileRequest_Header{Header: &workspacev1.WriteFileHeader{Path: "/a"}}}), uint8(1))
	f.Fuzz(func(t *testing.T, wire []byte, frame uint8) {
		want := newWrite()
		wantErr := proto.Unmarshal(wire, want)
		got := newWrite()
		err := decode(t, wire, int(frame)+1, got)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("error %v, protobuf's %v", err, wantErr)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("decoded %v, protobuf %v", got, want)
		}
	})
}
