// Package utf8stream cuts a stream of bytes, read in chunks that may end
// inside a character, into pieces of whole UTF-8 text, and the bytes that
// are not UTF-8 into base64: what a command's live output becomes in the
// events clients read (REST's server-sent events, a completion's
// conch_event, an MCP progress notification).
package utf8stream

import (
	"bytes"
	"encoding/base64"
	"unicode/utf8"
)

// Chunk is one piece of a stream: UTF-8 text, or, for bytes that are not,
// base64 with Encoding "base64".
type Chunk struct {
	Data     string `json:"data"`
	Encoding string `json:"encoding,omitempty"`
}

// Splitter holds back the start of a character a chunk ends in until the
// next brings the rest. Its zero value is ready; one Splitter per stream.
type Splitter struct{ held []byte }

// Split returns the pieces of chunk b.
func (s *Splitter) Split(b []byte) []Chunk {
	data := append(s.held, b...)
	s.held = nil
	// Hold back an incomplete last character (at most 3 bytes).
	for n := 1; n <= utf8.UTFMax-1 && n <= len(data); n++ {
		i := len(data) - n
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				s.held = bytes.Clone(data[i:])
				data = data[:i]
			}
			break
		}
	}
	return encode(data)
}

// Flush returns what is held back, as the stream ended.
func (s *Splitter) Flush() []Chunk {
	data := s.held
	s.held = nil
	return encode(data)
}

func encode(data []byte) []Chunk {
	switch {
	case len(data) == 0:
		return nil
	case utf8.Valid(data):
		return []Chunk{{Data: string(data)}}
	}
	return []Chunk{{Data: base64.StdEncoding.EncodeToString(data), Encoding: "base64"}}
}
