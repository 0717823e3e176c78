package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/internal/display"
	"github.com/conch-sh/conch/services/internal/display/previewpb"
	"github.com/conch-sh/conch/services/internal/outbound"
)

// Default API base URLs.
const (
	DefaultSlackBaseURL    = "https://slack.com/api"
	DefaultTelegramBaseURL = "https://api.telegram.org"
)

// Text is the chat message for an approval: the id, command, cwd, agent,
// resolved paths, host and security, and how to answer.
func Text(a *approvalv1.Approval) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Exec approval request (id: %s)\n", a.GetId())
	fmt.Fprintf(&b, "Command: %s\n", display.Escape(a.GetCommand()))
	fmt.Fprintf(&b, "CWD: %s\n", display.Escape(a.GetCwd()))
	fmt.Fprintf(&b, "Agent: %s\n", display.Escape(a.GetAgent()))
	fmt.Fprintf(&b, "Resolved: %s\n", display.Escape(strings.Join(a.GetResolvedPaths(), ", ")))
	fmt.Fprintf(&b, "Host: %s\n", hostWord(a.GetHost()))
	fmt.Fprintf(&b, "Security: %s\n", securityWord(a.GetSecurity()))
	if a.GetSession() != "" {
		fmt.Fprintf(&b, "Session: %s\n", display.Escape(a.GetSession()))
	}
	if a.GetExpiresAt() != nil {
		fmt.Fprintf(&b, "Expires: %s\n", a.GetExpiresAt().AsTime().UTC().Format(time.RFC3339))
	}
	if p := previewpb.From(a.GetPreview()); p != nil {
		b.WriteString(strings.Join(p.Lines(), "\n") + "\n")
	}
	b.WriteString("\nReply with:\n")
	for _, d := range []string{"allow-once", "allow-session", "allow-always", "deny"} {
		if d == "allow-session" && a.GetSession() == "" {
			continue // only a command of a session can be allowed for it
		}
		fmt.Fprintf(&b, "/approve %s %s\n", a.GetId(), d)
	}
	return b.String()
}

func hostWord(h approvalv1.Host) string {
	return strings.ToLower(strings.TrimPrefix(h.String(), "HOST_"))
}

func securityWord(s approvalv1.Security) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "SECURITY_"))
}

// Matches reports whether cfg forwards a to its targets. Mode session
// alone sends nothing here: the session that asked already receives the
// pending approval as an event of its own conversation.
func Matches(cfg *approvalv1.ForwardingConfig, a *approvalv1.Approval) bool {
	m := cfg.GetMode()
	return (m == approvalv1.ForwardMode_FORWARD_MODE_TARGETS || m == approvalv1.ForwardMode_FORWARD_MODE_BOTH) && filtered(cfg, a)
}

// ToSession reports whether cfg forwards a to the conversation that asked,
// as a message its user answers with /approve there.
func ToSession(cfg *approvalv1.ForwardingConfig, a *approvalv1.Approval) bool {
	m := cfg.GetMode()
	return (m == approvalv1.ForwardMode_FORWARD_MODE_SESSION || m == approvalv1.ForwardMode_FORWARD_MODE_BOTH) && filtered(cfg, a)
}

// filtered reports whether forwarding is on and a passes its filters.
func filtered(cfg *approvalv1.ForwardingConfig, a *approvalv1.Approval) bool {
	if !cfg.GetEnabled() {
		return false
	}
	if f := cfg.GetAgentFilter(); len(f) > 0 && !slices.Contains(f, a.GetAgent()) {
		return false
	}
	if f := cfg.GetSessionFilter(); f != "" {
		re, isRE, err := SessionFilter(f)
		switch {
		case err != nil:
			return false
		case isRE:
			return re.MatchString(a.GetSession())
		default:
			return strings.Contains(a.GetSession(), f)
		}
	}
	return true
}

// SessionFilter compiles a filter written as /regex/; isRE is false for a
// plain substring.
func SessionFilter(f string) (*regexp.Regexp, bool, error) {
	if len(f) >= 2 && strings.HasPrefix(f, "/") && strings.HasSuffix(f, "/") {
		re, err := regexp.Compile(f[1 : len(f)-1])
		return re, true, err
	}
	return nil, false, nil
}

// Sender delivers messages over HTTP.
type Sender struct {
	// Client is the HTTP client: one through the outbound guard, since
	// every URL here is a tenant's. Nil refuses to send.
	Client *http.Client
}

// Timeout bounds one delivery.
const Timeout = 10 * time.Second

func (s *Sender) client() (*http.Client, error) {
	if s.Client == nil {
		return nil, errors.New("notify: no outbound client")
	}
	return s.Client, nil
}

// OutcomeText is the chat message saying how an approval ended.
func OutcomeText(id, state, decision, by string) string {
	switch {
	case state == "expired":
		return fmt.Sprintf("Exec approval %s expired without an answer; the fallback decided.", id)
	case by != "":
		return fmt.Sprintf("Exec approval %s: %s (%s) by %s.", id, state, decision, display.Escape(by))
	}
	return fmt.Sprintf("Exec approval %s: %s (%s).", id, state, decision)
}

// Send delivers the announcement of a to one target.
func (s *Sender) Send(ctx context.Context, ch *approvalv1.ChannelSettings, t *approvalv1.ForwardTarget, a *approvalv1.Approval) error {
	return s.deliver(ctx, ch, t, Text(a), a)
}

// SendText delivers a plain message to one target.
func (s *Sender) SendText(ctx context.Context, ch *approvalv1.ChannelSettings, t *approvalv1.ForwardTarget, text string) error {
	return s.deliver(ctx, ch, t, text, nil)
}

func (s *Sender) deliver(ctx context.Context, ch *approvalv1.ChannelSettings, t *approvalv1.ForwardTarget, text string, a *approvalv1.Approval) error {
	switch t.GetChannel() {
	case approvalv1.Channel_CHANNEL_WEBHOOK:
		payload := map[string]any{"type": "exec.approval.notice", "text": text}
		if a != nil {
			payload["type"] = "exec.approval.requested"
			payload["approval"] = map[string]any{
				"id": a.GetId(), "command": a.GetCommand(), "cwd": a.GetCwd(), "agent": a.GetAgent(),
				"resolved_paths": a.GetResolvedPaths(), "host": hostWord(a.GetHost()), "security": securityWord(a.GetSecurity()),
				"session": a.GetSession(), "user": a.GetUser(),
				"expires_at": a.GetExpiresAt().AsTime().UTC().Format(time.RFC3339),
			}
		}
		body, _ := json.Marshal(payload)
		hdr := http.Header{}
		if sec := ch.GetWebhookSecret(); sec != "" {
			mac := hmac.New(sha256.New, []byte(sec))
			mac.Write(body)
			hdr.Set("X-Conch-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		}
		_, err := s.post(ctx, t.GetTo(), hdr, body)
		return err
	case approvalv1.Channel_CHANNEL_SLACK:
		u, err := outbound.JoinPath(orDefault(ch.GetSlackBaseUrl(), DefaultSlackBaseURL), "chat.postMessage")
		if err != nil {
			return fmt.Errorf("notify: slack_base_url: %w", err)
		}
		body, _ := json.Marshal(map[string]any{"channel": t.GetTo(), "text": text})
		hdr := http.Header{"Authorization": {"Bearer " + ch.GetSlackToken()}}
		return apiOK(s.post(ctx, u, hdr, body))
	case approvalv1.Channel_CHANNEL_TELEGRAM:
		u, err := outbound.JoinPath(orDefault(ch.GetTelegramBaseUrl(), DefaultTelegramBaseURL), "bot"+url.PathEscape(ch.GetTelegramToken()), "sendMessage")
		if err != nil {
			return fmt.Errorf("notify: telegram_base_url: %w", err)
		}
		body, _ := json.Marshal(map[string]any{"chat_id": t.GetTo(), "text": text})
		return apiOK(s.post(ctx, u, nil, body))
	}
	return fmt.Errorf("notify: unknown channel %v", t.GetChannel())
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func (s *Sender) post(ctx context.Context, u string, hdr http.Header, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("notify: request: %w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	client, err := s.client()
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("notify: post: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("notify: post: HTTP %s", strconv.Itoa(resp.StatusCode))
	}
	return b, nil
}

// apiOK checks Slack's and Telegram's {"ok": true}.
func apiOK(b []byte, err error) error {
	if err != nil {
		return err
	}
	var r struct {
		OK          bool   `json:"ok"`
		Error       string `json:"error"`
		Description string `json:"description"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("notify: unreadable API answer: %w", err)
	}
	if !r.OK {
		return fmt.Errorf("notify: API refused the message: %s%s", r.Error, r.Description)
	}
	return nil
}
