// Package chunks owns how file content is cut into the messages of a gRPC
// stream, and the buffers gRPC receives those messages into.
package chunks

import (
	"io"

	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// Size is the content carried by one streamed message of file bytes.
// gRPC spends CPU per message, so larger messages move bytes cheaper;
// measured on a 100 MB upload, 512 KiB and 1 MiB messages raised conch's
// peak RSS by 6 to 13 MiB, and 32 KiB ones cost a tenth more CPU.
const Size = 256 << 10

// Window is the flow-control window of one gRPC stream, in bytes: what a
// sender may have in flight that its receiver has not read, four
// messages of Size. ConnWindow is that of a whole connection. The
// services' servers and clients set both (packages grpcserver and
// discovery). They are fixed because gRPC's bandwidth-delay estimate
// would otherwise:
//   - grow them to many MiB on a fast link, so that a streamed download
//     or upload sits that far ahead in the receiver's memory;
//   - send a PING and a WINDOW_UPDATE on almost every message it
//     receives, since small unary calls never let its estimate settle.
const (
	Window     = 4 * Size
	ConnWindow = 4 * Window
)

// pool is gRPC's default buffer pool in every process that links this
// package, which every gRPC server and client of conch does: gRPC's own
// tiers, and one that fits a message of Size bytes of content with its
// framing. gRPC marshals each message into a pooled buffer, reads each
// one into another, and zeroes a pooled buffer whole before reusing it,
// so without that tier every file message would take, and clear, two
// 1 MiB buffers.
var pool = mem.NewTieredBufferPool(256, 4<<10, 16<<10, 32<<10, Size+4<<10, 1<<20)

// The default pool may only be set while the process initializes, before
// any server or client exists.
func init() { experimental.SetDefaultBufferPool(pool) }

// Fill reads into buf until it is full or r fails, and returns r's error
// as is: io.EOF is a complete body, io.ErrUnexpectedEOF one cut short
// (io.ReadFull would report a short last chunk as the latter too).
func Fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
