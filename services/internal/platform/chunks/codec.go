package chunks

import (
	"encoding/binary"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// CodecName is the content-subtype of the streams whose messages of file
// bytes a receiver decodes into one buffer it reuses (see Codec).
const CodecName = "conch-chunks"

// CallOption makes a call use Codec. Every conch service links this
// package; a server that did not would decode the call with protobuf, to
// which gRPC falls back for a content-subtype it does not know.
func CallOption() grpc.CallOption { return grpc.CallContentSubtype(CodecName) }

func init() { encoding.RegisterCodecV2(Codec{}) }

// protobuf is gRPC's own codec, which Codec defers to.
var protobuf = encoding.GetCodecV2(grpcproto.Name)

// Codec is protobuf, except that a message that is nothing but one bytes
// field is decoded into that field's current value when it fits: a
// receiver that hands RecvMsg the same message each time receives a
// stream of file content (messages of Size bytes, a shorter last) into
// one buffer, where protobuf allocates a new one per message, and gRPC
// first gathers the message's frames into another. The receiver must be
// done with the previous content before it receives the next. Every other
// message is decoded by protobuf itself.
type Codec struct{}

// Name is CodecName.
func (Codec) Name() string { return CodecName }

// Marshal is protobuf's: the message's bytes are copied into a pooled
// buffer, so the sender may reuse them once Send returns.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	return protobuf.Marshal(v)
}

// Unmarshal decodes data into v.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return protobuf.Unmarshal(data, v)
	}
	if fd, head, ok := onlyBytes(data, m.ProtoReflect().Descriptor()); ok {
		n := data.Len() - head
		// The current value's length, not its capacity: protoreflect
		// keeps no capacity.
		buf := m.ProtoReflect().Get(fd).Bytes()
		if len(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		copyAt(data, head, buf)
		proto.Reset(m)
		m.ProtoReflect().Set(fd, protoreflect.ValueOfBytes(buf))
		return nil
	}
	return protobuf.Unmarshal(data, v)
}

// onlyBytes reports whether data is one field of md, of bytes, and
// nothing else, and returns the field and the length of its tag and
// length, which its content follows to the end.
func onlyBytes(data mem.BufferSlice, md protoreflect.MessageDescriptor) (protoreflect.FieldDescriptor, int, bool) {
	// A tag and a length are at most 2*binary.MaxVarintLen64 bytes.
	var head [2 * binary.MaxVarintLen64]byte
	h := head[:copyAt(data, 0, head[:])]
	num, typ, n := protowire.ConsumeTag(h)
	if n < 0 || typ != protowire.BytesType {
		return nil, 0, false
	}
	fd := md.Fields().ByNumber(num)
	if fd == nil || fd.Kind() != protoreflect.BytesKind || fd.IsList() || fd.IsMap() {
		return nil, 0, false
	}
	size, m := protowire.ConsumeVarint(h[n:])
	if m < 0 || size != uint64(data.Len()-n-m) {
		return nil, 0, false
	}
	return fd, n + m, true
}

// copyAt copies into p the bytes of data from offset off, as many as p
// holds or data has, and returns how many.
func copyAt(data mem.BufferSlice, off int, p []byte) int {
	n := 0
	for _, b := range data {
		d := b.ReadOnlyData()
		if off >= len(d) {
			off -= len(d)
			continue
		}
		n += copy(p[n:], d[off:])
		off = 0
		if n == len(p) {
			break
		}
	}
	return n
}
