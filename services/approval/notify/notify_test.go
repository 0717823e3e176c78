package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/display"
	"github.com/conch-sh/conch/services/internal/display/displaytest"
)

// Every channel shows the approval's untrusted fields escaped by the one
// shared function, tested with the one shared table.
func TestNotificationsEscapeTheSharedTable(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Text string `json:"text"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("%s: %v", r.URL.Path, err)
		}
		mu.Lock()
		got[r.URL.Path] = body.Text
		mu.Unlock()
		_, _ = w.Write([]byte(`{"ok": true}`))
	}))
	defer srv.Close()
	ch := &approvalv1.ChannelSettings{SlackBaseUrl: srv.URL + "/slack", SlackToken: "x", TelegramBaseUrl: srv.URL + "/tg", TelegramToken: "T"}
	targets := map[string]*approvalv1.ForwardTarget{
		"/hook":                   {Channel: approvalv1.Channel_CHANNEL_WEBHOOK, To: srv.URL + "/hook"},
		"/slack/chat.postMessage": {Channel: approvalv1.Channel_CHANNEL_SLACK, To: "C1"},
		"/tg/botT/sendMessage":    {Channel: approvalv1.Channel_CHANNEL_TELEGRAM, To: "1"},
	}
	s := &Sender{Client: srv.Client()}
	for _, tc := range displaytest.Cases {
		a := &approvalv1.Approval{Id: "A1", Command: tc.In, Cwd: tc.In, Agent: tc.In, ResolvedPaths: []string{tc.In}, Session: tc.In}
		for path, target := range targets {
			if err := s.Send(t.Context(), ch, target, a); err != nil {
				t.Fatalf("%s: %v", tc.Name, err)
			}
			mu.Lock()
			text := got[path]
			mu.Unlock()
			for _, field := range []string{"Command", "CWD", "Agent", "Resolved", "Session"} {
				if want := "\n" + field + ": " + tc.Want + "\n"; !strings.Contains(text, want) {
					t.Errorf("%s on %s: message lacks %q:\n%s", tc.Name, path, want, text)
				}
			}
		}
		if got, want := OutcomeText("A1", "allowed", "allow-once", tc.In), "Exec approval A1: allowed (allow-once) by "+tc.Want+"."; got != want {
			t.Errorf("%s: outcome %q, want %q", tc.Name, got, want)
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
	s := &Sender{Client: srv.Client()}
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

// A chat message shows an approval's preview, with what it is.
func TestTextShowsThePreview(t *testing.T) {
	a := &approvalv1.Approval{Id: "a1", Command: "touch x", Preview: &approvalv1.Preview{ExitCode: 0, Changes: []*approvalv1.PreviewChange{
		{Path: "/home/workspace/x", Change: approvalv1.PreviewChangeKind_PREVIEW_CHANGE_KIND_CREATED},
	}}}
	got := Text(a)
	for _, want := range []string{"Preview (" + display.PreviewCaveat + "):", "created /home/workspace/x (0 bytes)", "/approve a1 allow-once"} {
		if !strings.Contains(got, want) {
			t.Errorf("Text = %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(Text(&approvalv1.Approval{Id: "a2"}), "Preview") {
		t.Error("an approval without a preview shows one")
	}
}
