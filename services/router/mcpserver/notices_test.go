package mcpserver

import (
	"net/http/httptest"
	"testing"
	"time"
)

// A call's response counts the withdrawal notices written on it, and
// nothing else that mentions one.
func TestNoticeWriter(t *testing.T) {
	t.Parallel()
	w := newNoticeWriter(httptest.NewRecorder())
	first, second := w.expect(), w.expect()
	for _, ev := range []string{
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"elicitation/create\",\"params\":{}}\n\n",
		// A result whose text names the method is not a notice.
		"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"notifications/cancelled\"}]}}\n\n",
		"event: message\nid: 0_1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1}}\n\n",
	} {
		if _, err := w.Write([]byte(ev)); err != nil {
			t.Fatal(err)
		}
	}
	if !w.wait(first, time.Second) {
		t.Fatal("the notice written was not counted")
	}
	if w.wait(second, 10*time.Millisecond) {
		t.Fatal("a notice not written was counted")
	}
	done := make(chan bool, 1)
	go func() { done <- w.wait(second, 10*time.Second) }()
	if _, err := w.Write([]byte("data: {\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":2}}\n\n")); err != nil {
		t.Fatal(err)
	}
	if !<-done {
		t.Fatal("a waiter was not told of the second notice")
	}
}
