package mcpserver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// noticeWriter is the HTTP response of a tools/call request, on which the
// SDK writes the call's questions, its withdrawal notices and its result.
// It counts the withdrawal notices (notifications/cancelled) written, so
// that a call that withdrew a question answers only once the client has
// been told: the SDK sends the notice from a goroutine of its own, and a
// result written first ends the response, after which the SDK drops the
// notice and the client's question stays open.
type noticeWriter struct {
	http.ResponseWriter

	mu       sync.Mutex
	expected int
	written  int
	// more is closed, and replaced, when a notice is written.
	more chan struct{}
}

func newNoticeWriter(w http.ResponseWriter) *noticeWriter {
	return &noticeWriter{ResponseWriter: w, more: make(chan struct{})}
}

// Write implements http.ResponseWriter. The SDK writes each event whole.
func (w *noticeWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	if err == nil && isCancelNotice(p) {
		w.mu.Lock()
		w.written++
		close(w.more)
		w.more = make(chan struct{})
		w.mu.Unlock()
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the response's Flush.
func (w *noticeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// expect counts one more notice to come (a question withdrawn) and
// returns how many must be written for it to be out.
func (w *noticeWriter) expect() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expected++
	return w.expected
}

// wait waits until n notices are written, or for at most d; it reports
// whether they were.
func (w *noticeWriter) wait(n int, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		w.mu.Lock()
		written, more := w.written, w.more
		w.mu.Unlock()
		if written >= n {
			return true
		}
		select {
		case <-more:
		case <-timer.C:
			return false
		}
	}
}

// isCancelNotice reports whether the server-sent event p carries a
// notifications/cancelled message.
func isCancelNotice(p []byte) bool {
	const method = "notifications/cancelled"
	if !bytes.Contains(p, []byte(method)) {
		return false
	}
	for line := range bytes.Lines(p) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var msg struct {
			Method string `json:"method"`
		}
		if json.Unmarshal(data, &msg) == nil && msg.Method == method {
			return true
		}
	}
	return false
}

// noticeKey is the context key of a tools/call request's noticeWriter,
// which the bearer check puts in the request's TokenInfo as noticeExtra.
type noticeKey struct{}

const noticeExtra = "conch.notices"

// requestNotices is the noticeWriter of the tools/call request that
// carried an MCP request, nil for any other.
func requestNotices(extra *mcp.RequestExtra) *noticeWriter {
	if extra == nil || extra.TokenInfo == nil {
		return nil
	}
	w, _ := extra.TokenInfo.Extra[noticeExtra].(*noticeWriter)
	return w
}
