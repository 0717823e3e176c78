package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// answer is one scripted reply of the fake upstream.
type answer struct {
	status int
	header map[string]string
	body   string
}

// fakeModel is an upstream model on loopback that replies from a script
// (the last reply repeats) and records when each request arrived. A fake
// is right here: the upstream model is outside our control.
type fakeModel struct {
	*httptest.Server
	mu    sync.Mutex
	times []time.Time
}

func newFakeModel(t *testing.T, script ...answer) *fakeModel {
	t.Helper()
	f := &fakeModel{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		f.mu.Lock()
		n := len(f.times)
		f.times = append(f.times, time.Now())
		f.mu.Unlock()
		a := script[min(n, len(script)-1)]
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeModel) arrivals() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.times...)
}

const (
	okBody       = `{"id":"up-1","choices":[{"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`
	limitedBody  = `{"error":{"message":"slow down","type":"rate_limit_error"}}`
	upstreamKey  = "sk-upstream-secret-key"
	refusedBody  = `{"error":{"message":"Incorrect API key provided: sk-upstream-secret-key.","type":"invalid_request_error","code":"invalid_api_key"}}`
	testMaxWait  = 2 * time.Second
	slowerThanUs = 10 * time.Second // bound on how late a retry may come
)

func TestRetryHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	limited := func(h map[string]string) answer { return answer{http.StatusTooManyRequests, h, limitedBody} }
	ok := answer{http.StatusOK, nil, okBody}
	tests := []struct {
		name     string
		script   []answer
		deadline time.Duration // of the call's context; 0: none
		// wantCalls is how many requests the upstream gets.
		wantCalls int
		// wantGap is the least time between consecutive requests.
		wantGap time.Duration
		// wantStatus is the status of the error returned, 0 for success.
		wantStatus     int
		wantRetryAfter time.Duration
	}{
		{"retry-after-ms is waited out", []answer{limited(map[string]string{"Retry-After-Ms": "300"}), ok}, 0, 2, 300 * time.Millisecond, 0, 0},
		{"Retry-After in seconds is waited out", []answer{limited(map[string]string{"Retry-After": "1"}), ok}, 0, 2, time.Second, 0, 0},
		{"Retry-After longer than MaxWait gives up at once", []answer{limited(map[string]string{"Retry-After": "7"})}, 0, 1, 0, 429, 7 * time.Second},
		{"Retry-After beyond the deadline gives up at once", []answer{limited(map[string]string{"Retry-After": "1"})}, 500 * time.Millisecond, 1, 0, 429, time.Second},
		{"attempts are bounded", []answer{limited(map[string]string{"Retry-After-Ms": "50"})}, 0, 3, 50 * time.Millisecond, 429, 50 * time.Millisecond},
		{"no Retry-After backs off", []answer{limited(nil), ok}, 0, 2, 0, 0, 0},
		{"a refused key is not retried", []answer{{http.StatusUnauthorized, nil, refusedBody}}, 0, 1, 0, 401, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := newFakeModel(t, tt.script...)
			p := &OpenAI{BaseURL: up.URL, APIKey: upstreamKey, Client: up.Client(),
				Retry: RetryPolicy{Attempts: 3, Base: 10 * time.Millisecond, Max: 50 * time.Millisecond, MaxWait: testMaxWait}}
			ctx := t.Context()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			start := time.Now()
			_, err := p.Complete(ctx, &Request{Model: "m", Messages: []Message{{Role: "user", Content: "hi"}}}, nil)
			elapsed := time.Since(start)

			var ue *Error
			switch {
			case tt.wantStatus == 0 && err != nil:
				t.Fatalf("Complete: %v", err)
			case tt.wantStatus != 0 && (!errors.As(err, &ue) || ue.Status != tt.wantStatus):
				t.Fatalf("Complete: %v, want upstream status %d", err, tt.wantStatus)
			}
			if ue != nil && ue.RetryAfter != tt.wantRetryAfter {
				t.Errorf("RetryAfter = %v, want %v", ue.RetryAfter, tt.wantRetryAfter)
			}
			if ue != nil && strings.Contains(ue.Message, upstreamKey) {
				t.Errorf("message %q holds the upstream key", ue.Message)
			}
			at := up.arrivals()
			if len(at) != tt.wantCalls {
				t.Fatalf("upstream got %d requests, want %d", len(at), tt.wantCalls)
			}
			for i := 1; i < len(at); i++ {
				if gap := at[i].Sub(at[i-1]); gap < tt.wantGap || gap > tt.wantGap+slowerThanUs {
					t.Errorf("request %d came %v after the one before, want at least %v", i, gap, tt.wantGap)
				}
			}
			// Giving up must not wait first: the caller learns at once.
			if tt.wantCalls == 1 && elapsed > time.Second/2 && tt.wantStatus != 0 {
				t.Errorf("gave up after %v, want at once", elapsed)
			}
		})
	}
}

func TestRetryAfterHeader(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		header map[string]string
		want   time.Duration
	}{
		{map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{map[string]string{"Retry-After": now.Add(3 * time.Second).Format(http.TimeFormat)}, 3 * time.Second},
		{map[string]string{"Retry-After": now.Add(-time.Second).Format(http.TimeFormat)}, 0},
		{map[string]string{"Retry-After": "soon"}, 0},
		{map[string]string{"Retry-After": "-3"}, 0},
		{map[string]string{"Retry-After": "7", "Retry-After-Ms": "1500"}, 1500 * time.Millisecond},
		{nil, 0},
	}
	for _, tt := range tests {
		h := http.Header{}
		for k, v := range tt.header {
			h.Set(k, v)
		}
		if got := retryAfter(h, now); got != tt.want {
			t.Errorf("retryAfter(%v) = %v, want %v", tt.header, got, tt.want)
		}
	}
}
