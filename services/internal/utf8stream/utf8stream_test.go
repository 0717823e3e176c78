package utf8stream

import "testing"

// A stream's chunks become events of whole UTF-8 text, whatever byte a
// chunk ends on; bytes that are no text go as base64.
func TestSplitter(t *testing.T) {
	for _, c := range []struct {
		name   string
		chunks []string
		want   []Chunk
	}{
		{"ascii", []string{"hello ", "world\n"}, []Chunk{{Data: "hello "}, {Data: "world\n"}}},
		{"a character cut in two", []string{"caf\xc3", "\xa9!"}, []Chunk{{Data: "caf"}, {Data: "é!"}}},
		{"a character cut in three", []string{"\xe2", "\x82", "\xac"}, []Chunk{{Data: "€"}}},
		{"a four-byte character, then more", []string{"\xf0\x9f\x90", "\x9a ok"}, []Chunk{{Data: "🐚 ok"}}},
		{"invalid bytes", []string{"a\xffb"}, []Chunk{{Data: "Yf9i", Encoding: "base64"}}},
		{"a cut character at the end", []string{"x\xe2\x82"}, []Chunk{{Data: "x"}, {Data: "4oI=", Encoding: "base64"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var u Splitter
			var got []Chunk
			for _, ch := range c.chunks {
				got = append(got, u.Split([]byte(ch))...)
			}
			got = append(got, u.Flush()...)
			if len(got) != len(c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("event %d: got %q, want %q", i, got[i], c.want[i])
				}
			}
		})
	}
}
