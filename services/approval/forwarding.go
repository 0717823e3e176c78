package approval

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/notify"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/execpolicy"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// redacted removes the secrets of cfg, saying which are set.
func redacted(cfg *approvalv1.ForwardingConfig) *approvalv1.ForwardingConfig {
	out := proto.Clone(cfg).(*approvalv1.ForwardingConfig)
	ch := out.GetChannels()
	if ch == nil {
		ch = &approvalv1.ChannelSettings{}
		out.Channels = ch
	}
	ch.SlackTokenSet, ch.TelegramTokenSet, ch.WebhookSecretSet = ch.SlackToken != "", ch.TelegramToken != "", ch.WebhookSecret != ""
	ch.SlackToken, ch.TelegramToken, ch.WebhookSecret = "", "", ""
	return out
}

// GetForwarding implements ApprovalService.
func (s *Server) GetForwarding(ctx context.Context, _ *approvalv1.GetForwardingRequest) (*approvalv1.GetForwardingResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	cfg, err := s.store.Forwarding(ctx, account)
	if err != nil {
		return nil, err
	}
	return &approvalv1.GetForwardingResponse{Config: redacted(cfg)}, nil
}

// validURL checks a URL the approval service will call for the tenant
// (package outbound owns the rule); empty is no URL.
func validURL(guard *outbound.Guard, field, v string, kind outbound.URLKind) error {
	if v == "" {
		return nil
	}
	if _, err := guard.ParseURL(v, kind); err != nil {
		return errs.New(errs.InvalidArgument, "%s: %v", field, err)
	}
	return nil
}

func validateForwarding(cfg *approvalv1.ForwardingConfig, guard *outbound.Guard) error {
	if _, ok := approvalv1.ForwardMode_name[int32(cfg.GetMode())]; !ok {
		return errs.New(errs.InvalidArgument, "mode: want session, targets or both")
	}
	if f := cfg.GetSessionFilter(); f != "" {
		if _, _, err := notify.SessionFilter(f); err != nil {
			return errs.New(errs.InvalidArgument, "session_filter: %v", err)
		}
	}
	for i, t := range cfg.GetTargets() {
		field := fmt.Sprintf("targets[%d]", i)
		if t.GetTo() == "" {
			return errs.New(errs.InvalidArgument, "%s.to: required", field)
		}
		switch t.GetChannel() {
		case approvalv1.Channel_CHANNEL_WEBHOOK:
			if err := validURL(guard, field+".to", t.GetTo(), outbound.Endpoint); err != nil {
				return err
			}
		case approvalv1.Channel_CHANNEL_SLACK, approvalv1.Channel_CHANNEL_TELEGRAM:
		default:
			return errs.New(errs.InvalidArgument, "%s.channel: want webhook, slack or telegram", field)
		}
	}
	for i, a := range cfg.GetApprovers() {
		switch {
		case a.GetId() == "" || a.GetChannel() == approvalv1.Channel_CHANNEL_UNSPECIFIED:
			return errs.New(errs.InvalidArgument, "approvers[%d]: channel and id required", i)
		case a.GetChannel() == approvalv1.Channel_CHANNEL_SESSION:
			return errs.New(errs.InvalidArgument, "approvers[%d].channel: a session's own user answers in session mode; approvers are webhook, slack or telegram ids", i)
		}
	}
	ch := cfg.GetChannels()
	if err := validURL(guard, "channels.slack_base_url", ch.GetSlackBaseUrl(), outbound.Base); err != nil {
		return err
	}
	return validURL(guard, "channels.telegram_base_url", ch.GetTelegramBaseUrl(), outbound.Base)
}

// PutForwarding implements ApprovalService.
func (s *Server) PutForwarding(ctx context.Context, req *approvalv1.PutForwardingRequest) (*approvalv1.PutForwardingResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	cfg := proto.Clone(req.GetConfig()).(*approvalv1.ForwardingConfig)
	if cfg == nil {
		cfg = &approvalv1.ForwardingConfig{}
	}
	if err := validateForwarding(cfg, s.cfg.Outbound); err != nil {
		return nil, err
	}
	old, err := s.store.Forwarding(ctx, account)
	if err != nil {
		return nil, err
	}
	if cfg.Channels == nil {
		cfg.Channels = &approvalv1.ChannelSettings{}
	}
	ch, oldCh := cfg.Channels, old.GetChannels()
	// Secrets are write-only: left empty they keep their stored values.
	if ch.SlackToken == "" {
		ch.SlackToken = oldCh.GetSlackToken()
	}
	if ch.TelegramToken == "" {
		ch.TelegramToken = oldCh.GetTelegramToken()
	}
	if ch.WebhookSecret == "" {
		ch.WebhookSecret = oldCh.GetWebhookSecret()
	}
	ch.SlackTokenSet, ch.TelegramTokenSet, ch.WebhookSecretSet = false, false, false
	if err := s.store.PutForwarding(ctx, account, cfg); err != nil {
		return nil, err
	}
	return &approvalv1.PutForwardingResponse{Config: redacted(cfg)}, nil
}

const chatUsage = "usage: /approve <id> " + execpolicy.DecisionWords

// HandleChatCommand implements ApprovalService.
func (s *Server) HandleChatCommand(ctx context.Context, req *approvalv1.HandleChatCommandRequest) (*approvalv1.HandleChatCommandResponse, error) {
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetChannel() == approvalv1.Channel_CHANNEL_UNSPECIFIED || req.GetFrom() == "" {
		return nil, errs.New(errs.InvalidArgument, "channel and from: required")
	}
	cfg, err := s.store.Forwarding(ctx, account)
	if err != nil {
		return nil, err
	}
	session := req.GetChannel() == approvalv1.Channel_CHANNEL_SESSION
	if session {
		// The user of a conversation answers its own approvals there, when
		// the account forwards approvals to sessions.
		sc, _ := tenant.From(ctx)
		if sc.Session == "" || sc.Session != req.GetFrom() {
			return nil, errs.New(errs.PermissionDenied, "from: only the caller's own session answers in it")
		}
		if !cfg.GetEnabled() || (cfg.GetMode() != approvalv1.ForwardMode_FORWARD_MODE_SESSION && cfg.GetMode() != approvalv1.ForwardMode_FORWARD_MODE_BOTH) {
			return nil, errs.New(errs.FailedPrecondition, "approvals are not answered in the conversation: forwarding mode is not session or both")
		}
	} else {
		approver := false
		for _, a := range cfg.GetApprovers() {
			if a.GetChannel() == req.GetChannel() && a.GetId() == req.GetFrom() {
				approver = true
			}
		}
		if !approver {
			return nil, errs.New(errs.PermissionDenied, "%s on %s is not a configured approver", req.GetFrom(), channelWord(req.GetChannel()))
		}
	}
	f := strings.Fields(req.GetText())
	if len(f) == 0 || (f[0] != "/approve" && !strings.HasPrefix(f[0], "/approve@")) {
		return nil, errs.New(errs.InvalidArgument, "text: not an /approve command; %s", chatUsage)
	}
	if len(f) != 3 {
		return nil, errs.New(errs.InvalidArgument, "text: %s", chatUsage)
	}
	d, ok := execpolicy.Decisions[strings.ToLower(f[2])]
	if !ok {
		return nil, errs.New(errs.InvalidArgument, "text: unknown decision %q; %s", f[2], chatUsage)
	}
	if session {
		// Another conversation's approval is not found from this one.
		a, err := s.store.Get(ctx, account, f[1])
		if err != nil {
			return nil, err
		}
		if a.Session != req.GetFrom() {
			return nil, errs.New(errs.NotFound, "approval %q not found in this session", f[1])
		}
	}
	// The sender was checked above (a configured approver, or the
	// caller's own session), so it is the approver recorded; the key that
	// relayed the message is logged beside it.
	relay, err := callerKey(ctx)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "chat command relayed", "account", account, "approval", f[1], "key", relay.Key, "surface", tenant.SurfaceOf(relay.Surface))
	a, err := s.resolve(ctx, account, f[1], d, channelWord(req.GetChannel())+":"+req.GetFrom())
	if err != nil {
		return nil, err
	}
	return &approvalv1.HandleChatCommandResponse{Reply: chatReply(a), Approval: approvalTo(a)}, nil
}

func chatReply(a *store.Approval) string {
	switch a.Decision {
	case store.DecisionAllowOnce:
		return fmt.Sprintf("Approval %s: allowed once. The command runs now.", a.ID)
	case store.DecisionAllowSession:
		return fmt.Sprintf("Approval %s: allowed for this session. The command runs now, and runs again in this session without asking.", a.ID)
	case store.DecisionAllowAlways:
		return fmt.Sprintf("Approval %s: allowed always. %s added to the allowlist of %s; the command runs now.", a.ID, orNothing(a.Recordable), a.Agent)
	}
	return fmt.Sprintf("Approval %s: denied. The command does not run.", a.ID)
}

func orNothing(paths []string) string {
	if len(paths) == 0 {
		return "Nothing"
	}
	return strings.Join(paths, ", ")
}

func channelWord(c approvalv1.Channel) string {
	return strings.ToLower(strings.TrimPrefix(c.String(), "CHANNEL_"))
}
