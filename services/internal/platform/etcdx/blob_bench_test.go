package etcdx

import "testing"

// BenchmarkEncodeBlob encodes a stored response of a few kilobytes, the
// common blob.
func BenchmarkEncodeBlob(b *testing.B) {
	v := map[string]any{"id": "resp_1", "output": []map[string]any{}}
	items := make([]map[string]any, 20)
	for i := range items {
		items[i] = map[string]any{"type": "message", "role": "assistant", "content": "the quick brown fox jumps over the lazy dog"}
	}
	v["output"] = items
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeBlob(v, 1<<20, BlobMaxRaw); err != nil {
			b.Fatal(err)
		}
	}
}
