package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
)

func TestEscape(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"ls -la":                "ls -la",
		"a\\b":                  `a\\b`,
		"ls\x1b[2K\rrm -rf /":   `ls\x1b[2K\x0drm -rf /`,
		"x\x00y":                `x\x00y`,
		"evil\u202etxt.exe":     `evil\u202etxt.exe`,
		"zero\u200bwidth\ufeff": `zero\u200bwidth\ufeff`,
		"isolate\u2066x\u2069":  `isolate\u2066x\u2069`,
		"c1\u0085control":       `c1\x85control`,
		"line\nbreak\ttab":      `line\nbreak\ttab`,
		"héllo wörld ✓":         "héllo wörld ✓",
		"del\x7f":               `del\x7f`,
		"soft\u00adhyphen":      `soft\u00adhyphen`,
		"arabic\u061cmark":      `arabic\u061cmark`,
		"invalid\xffutf8":       `invalid\ufffdutf8`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMatches(t *testing.T) {
	t.Parallel()
	a := &approvalv1.Approval{Agent: "main", Session: "discord:1234"}
	for _, tc := range []struct {
		cfg  *approvalv1.ForwardingConfig
		want bool
	}{
		{&approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS}, true},
		{&approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_BOTH}, true},
		{&approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_SESSION}, false},
		{&approvalv1.ForwardingConfig{Enabled: false, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS}, false},
		{&approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS, AgentFilter: []string{"other"}}, false},
		{&approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS, AgentFilter: []string{"other", "main"}}, true},
		{&approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS, SessionFilter: "discord"}, true},
		{&approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS, SessionFilter: "slack"}, false},
		{&approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS, SessionFilter: "/^discord:[0-9]+$/"}, true},
		{&approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS, SessionFilter: "/^slack/"}, false},
		{&approvalv1.ForwardingConfig{Enabled: true, Mode: approvalv1.ForwardMode_FORWARD_MODE_TARGETS, SessionFilter: "/([/"}, false},
	} {
		if got := Matches(tc.cfg, a); got != tc.want {
			t.Errorf("Matches(%v) = %v, want %v", tc.cfg, got, tc.want)
		}
	}
}

func TestSendFailuresAndSignature(t *testing.T) {
	t.Parallel()
	var body []byte
	var sig string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hook":
			body, _ = io.ReadAll(r.Body)
			sig = r.Header.Get("X-Conch-Signature")
		case "/slack/chat.postMessage":
			_, _ = w.Write([]byte(`{"ok": false, "error": "channel_not_found"}`))
		case "/tg/botT/sendMessage":
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	s := &Sender{}
	a := &approvalv1.Approval{Id: "A1", Command: "rm -rf x"}
	ch := &approvalv1.ChannelSettings{WebhookSecret: "k", SlackBaseUrl: srv.URL + "/slack", SlackToken: "x", TelegramBaseUrl: srv.URL + "/tg", TelegramToken: "T"}
	if err := s.Send(t.Context(), ch, &approvalv1.ForwardTarget{Channel: approvalv1.Channel_CHANNEL_WEBHOOK, To: srv.URL + "/hook"}, a); err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, []byte("k"))
	mac.Write(body)
	if sig != "sha256="+hex.EncodeToString(mac.Sum(nil)) || !strings.Contains(string(body), `"id":"A1"`) {
		t.Fatalf("webhook signature %q body %s", sig, body)
	}
	if err := s.Send(t.Context(), ch, &approvalv1.ForwardTarget{Channel: approvalv1.Channel_CHANNEL_SLACK, To: "C1"}, a); err == nil || !strings.Contains(err.Error(), "channel_not_found") {
		t.Fatalf("slack refusal: %v", err)
	}
	if err := s.Send(t.Context(), ch, &approvalv1.ForwardTarget{Channel: approvalv1.Channel_CHANNEL_TELEGRAM, To: "1"}, a); err == nil || !strings.Contains(err.Error(), "502") {
		t.Fatalf("telegram failure: %v", err)
	}
}
