// Package chunks cuts a streamed body into the chunks of a gRPC upload.
package chunks

import "io"

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
