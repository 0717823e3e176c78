// Package upstream calls the model behind a gateway: any OpenAI-compatible
// server, Anthropic's Messages API, or the built-in scripted model. The agent
// loop speaks one provider-neutral shape (OpenAI's chat messages); each
// provider maps it both ways.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/wirejson"
)

// Message is one chat message in OpenAI's shape. Raw, when set, is the
// message exactly as the client sent it and is forwarded unchanged to
// OpenAI-compatible upstreams, so fields conch does not know survive.
type Message struct {
	Role       string
	Content    string // text content (the concatenated text parts of Raw)
	Name       string
	ToolCalls  []ToolCall
	ToolCallID string
	Raw        json.RawMessage
}

// ToolCall is a function call the model made.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON object as a string
}

// Tool is a function tool offered to the model.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON Schema
}

// Request is one model call.
type Request struct {
	// Model is the upstream model name.
	Model    string
	Messages []Message
	Tools    []Tool
	// Extra holds the client's other top-level fields (temperature,
	// max_tokens, tool_choice, ...), passed through unchanged.
	Extra map[string]json.RawMessage
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
	u.TotalTokens += o.TotalTokens
}

// Response is the model's answer to one call.
type Response struct {
	ID           string
	Content      string
	ToolCalls    []ToolCall
	FinishReason string // stop, length, tool_calls, content_filter
	Usage        Usage
}

// Provider calls one kind of upstream.
type Provider interface {
	// Complete makes one model call. When onDelta is not nil the call
	// streams and onDelta receives the text content as it arrives.
	Complete(ctx context.Context, req *Request, onDelta func(string) error) (*Response, error)
}

// Error is an upstream's error answer as the upstream gave it. Which
// status conch answers with is not decided here: the /v1 handler maps it.
type Error struct {
	Status  int
	Message string
	Type    string
	Code    string
	// RetryAfter is how long the upstream asked to wait before trying
	// again (Retry-After or retry-after-ms); zero when it did not say.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("upstream: %d: %s", e.Status, e.Message)
}

// CredentialsRefused reports whether the upstream refused the gateway's
// own key (401 or 403). The client is not told so with that status: every
// SDK reads a 401 or 403 as the caller's key being wrong, which the caller
// cannot fix by changing theirs. It gets a 502 and CredentialsMessage.
func (e *Error) CredentialsRefused() bool {
	return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
}

// CredentialsMessage says the upstream of gateway ("" when unknown)
// refused its credentials.
func (e *Error) CredentialsMessage(gateway string) string {
	prefix := ""
	if gateway != "" {
		prefix = "gateway " + gateway + ": "
	}
	return fmt.Sprintf("%sthe upstream refused the gateway's credentials with %d %s: %s", prefix, e.Status, http.StatusText(e.Status), e.Message)
}

// RetryAfterHeader is the Retry-After a client is told, in whole seconds
// rounded up (a client must not come back early); "" when the upstream
// did not say.
func (e *Error) RetryAfterHeader() string {
	if e.RetryAfter <= 0 {
		return ""
	}
	return strconv.FormatInt(int64(math.Ceil(e.RetryAfter.Seconds())), 10)
}

// retryable reports whether a failed call may be retried: connection errors
// and 429/5xx answers.
func retryable(err error) bool {
	var ue *Error
	if errors.As(err, &ue) {
		return ue.Status == http.StatusTooManyRequests || ue.Status >= 500
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// RetryPolicy says how often and how long to retry.
type RetryPolicy struct {
	Attempts int           // total attempts, at least 1
	Base     time.Duration // first backoff; grows each time
	Max      time.Duration // cap on one backoff
	// MaxWait is the longest Retry-After conch waits out itself. A longer
	// one ends the call with the upstream's answer, which the client gets
	// with the same Retry-After: a router holding a completion open for
	// that long only ties up a slot, and the client is free to wait.
	MaxWait time.Duration
}

// DefaultRetry makes at most three attempts, backing off 200 ms then
// 800 ms, and waits out a Retry-After of up to 5 s.
var DefaultRetry = RetryPolicy{Attempts: 3, Base: 200 * time.Millisecond, Max: 2 * time.Second, MaxWait: 5 * time.Second}

// withRetry runs call until it succeeds, fails for good, or attempts run
// out. started reports whether output already reached the client, after
// which nothing may be retried. An upstream's Retry-After is honoured: no
// retry comes before it, and when it is longer than MaxWait or than what
// is left of ctx's deadline the call gives up at once, since waiting could
// only end in a timeout that hides the upstream's answer.
func withRetry[T any](ctx context.Context, p RetryPolicy, started func() bool, call func() (T, error)) (T, error) {
	backoff := p.Base
	for attempt := 1; ; attempt++ {
		v, err := call()
		if err == nil || attempt >= p.Attempts || !retryable(err) || (started != nil && started()) || ctx.Err() != nil {
			return v, err
		}
		wait := backoff
		var ue *Error
		if errors.As(err, &ue) && ue.RetryAfter > 0 {
			if ue.RetryAfter > p.MaxWait {
				return v, err
			}
			wait = ue.RetryAfter
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return v, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		backoff = min(backoff*4, p.Max)
	}
}

// retryAfter reads how long an answer asks the client to wait: OpenAI's
// retry-after-ms when present (it is finer), else Retry-After in seconds
// or as an HTTP date. It returns zero when the answer does not say.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 {
		return time.Duration(ms * float64(time.Millisecond))
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// ContentText returns the text of an OpenAI message content, which is a
// string or an array of parts of which the text ones count.
func ContentText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if wirejson.Strict(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if wirejson.Strict(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}
