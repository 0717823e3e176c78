// Package gate is what runs commands calls before running one
// (docs/explanation/exec-policy.md, "Every runner asks first"): it resolves
// the command's programs against the filesystem the command would really run
// with, asks the approval service, waits for a human when one must decide
// (following the approval across dropped streams), and returns the verdict
// with the policy's error string.
package gate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/policy"
)

// Client is the part of the approval service the gate uses.
type Client interface {
	Authorize(ctx context.Context, in *approvalv1.AuthorizeRequest, opts ...grpc.CallOption) (*approvalv1.AuthorizeResponse, error)
	WatchApproval(ctx context.Context, in *approvalv1.WatchApprovalRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[approvalv1.WatchApprovalResponse], error)
	AbandonApproval(ctx context.Context, in *approvalv1.AbandonApprovalRequest, opts ...grpc.CallOption) (*approvalv1.AbandonApprovalResponse, error)
}

// abandonTimeout bounds telling the approval service that nobody waits
// any more.
const abandonTimeout = 5 * time.Second

var _ Client = approvalv1.ApprovalServiceClient(nil)

// Request is one command about to run.
type Request struct {
	// Binding says what runs where, for whom.
	Binding *approvalv1.Binding
	// Settings are the gateway's exec settings with the session's
	// overrides applied.
	Settings *approvalv1.ExecSettings
	// Resolver resolves program names the way the command's shell will;
	// nil lets the approval service resolve on its own host.
	Resolver policy.Resolver
	// Home is where the command's shell goes on a bare cd; empty refuses
	// a bare cd.
	Home string
	// OnPending is called once when a human must decide, e.g. to show the
	// approval to the user; may be nil.
	OnPending func(*approvalv1.Approval)
	// Digest returns the content digest of a resolved file, binding an
	// approval to it (see FileDigest); nil sends none.
	Digest func(path string) (string, error)
	// Preview runs the command on a throwaway copy of where it would run,
	// before a human is asked, when the settings ask for previews (its
	// error goes in the preview); nil makes none.
	Preview func(ctx context.Context) *approvalv1.Preview
}

// MaxDigestBytes is the largest file FileDigest hashes.
const MaxDigestBytes = 64 << 20

// systemDirs hold binaries the commands judged here cannot change; hashing
// them on every command would only cost time.
var systemDirs = []string{"/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/etc/alternatives/"}

// SystemFile reports whether p is in the system dirs, whose files are not
// hashed.
func SystemFile(p string) bool {
	for _, d := range systemDirs {
		if strings.HasPrefix(p, d) {
			return true
		}
	}
	return false
}

// FileDigest returns "sha256:<hex>" of a file on this host, or "" for files
// in the system dirs. A file larger than MaxDigestBytes is an error.
func FileDigest(p string) (string, error) {
	if SystemFile(p) {
		return "", nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("gate: digest %s: %w", p, err)
	}
	defer f.Close()
	d, err := ReadDigest(f)
	if err != nil {
		return "", fmt.Errorf("gate: digest %s: %w", p, err)
	}
	return d, nil
}

// ReadDigest returns "sha256:<hex>" of what r reads; more than
// MaxDigestBytes is an error.
func ReadDigest(r io.Reader) (string, error) {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, MaxDigestBytes+1))
	if err != nil {
		return "", err
	}
	if n > MaxDigestBytes {
		return "", fmt.Errorf("larger than %d bytes", MaxDigestBytes)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// Verdict is the outcome.
type Verdict struct {
	// Allowed reports whether the command may run now.
	Allowed bool
	// Plan is what runs in place of the command when the policy judged its
	// structure (see policy.Result.Plan); empty means the command runs as
	// written.
	Plan string
	// Reason is the policy's error string when not allowed.
	Reason string
	// Approval is the approval a human answered, if one was needed.
	Approval *approvalv1.Approval
}

// Segments resolves the programs of command as its shell would in cwd,
// with home its home directory, for the approval service to judge with.
func Segments(command, cwd, home string, r policy.Resolver) []*approvalv1.Segment {
	res := policy.New(policy.Config{Home: home}).Evaluate(policy.Request{
		Command: command, Cwd: cwd, Resolver: r, Settings: policy.Settings{Security: policy.SecurityFull, Ask: policy.AskOff},
	})
	out := make([]*approvalv1.Segment, 0, len(res.Programs))
	for _, p := range res.Programs {
		out = append(out, &approvalv1.Segment{Argv: []string{p.Name}, ResolvedPath: p.Path, RealPath: p.RealPath})
	}
	return out
}

// Check asks the approval service whether the command may run, waiting for
// a human's answer or the timeout when one is needed. Programs and their
// digests are resolved again right before an approval is used, so a file
// changed while the human decided no longer matches.
func Check(ctx context.Context, c Client, req Request) (Verdict, error) {
	areq := &approvalv1.AuthorizeRequest{Binding: req.Binding, Settings: req.Settings}
	if reason := prepare(areq, req); reason != "" {
		return Verdict{Reason: reason}, nil
	}
	preview := req.Preview != nil && req.Settings.GetPreview()
	areq.AskWithoutApproval = preview
	resp, err := c.Authorize(ctx, areq)
	if err != nil {
		return Verdict{}, fmt.Errorf("gate: authorize: %w", err)
	}
	if preview && resp.GetDecision() == approvalv1.PolicyDecision_POLICY_DECISION_ASK {
		// Asked again, the same request creates the approval, with
		// what the command did on a copy; the service judges it anew.
		areq.AskWithoutApproval, areq.Preview = false, req.Preview(ctx)
		if resp, err = c.Authorize(ctx, areq); err != nil {
			return Verdict{}, fmt.Errorf("gate: authorize: %w", err)
		}
	}
	switch resp.GetDecision() {
	case approvalv1.PolicyDecision_POLICY_DECISION_ALLOW:
		return allowed(resp, nil), nil
	case approvalv1.PolicyDecision_POLICY_DECISION_ASK:
	default:
		return Verdict{Reason: resp.GetReason()}, nil
	}
	pending := resp.GetApproval()
	if req.OnPending != nil {
		req.OnPending(pending)
	}
	final, err := wait(ctx, c, pending.GetId())
	if err != nil {
		if callerGone(ctx, err) {
			abandon(ctx, c, pending.GetId(), timedOut(ctx, err))
		}
		return Verdict{}, err
	}
	areq = &approvalv1.AuthorizeRequest{Binding: req.Binding, Settings: req.Settings, ApprovalId: final.GetId()}
	if reason := prepare(areq, req); reason != "" {
		return Verdict{Reason: reason, Approval: final}, nil
	}
	resp, err = c.Authorize(ctx, areq)
	if status.Code(err) == codes.PermissionDenied {
		return Verdict{Reason: policy.ErrNotAllowed + ": " + status.Convert(err).Message(), Approval: final}, nil
	}
	if err != nil {
		return Verdict{}, fmt.Errorf("gate: use approval %s: %w", final.GetId(), err)
	}
	if resp.GetDecision() == approvalv1.PolicyDecision_POLICY_DECISION_ALLOW {
		return allowed(resp, resp.GetApproval()), nil
	}
	return Verdict{Reason: resp.GetReason(), Approval: resp.GetApproval()}, nil
}

// abandon ends an approval whose requester is gone (ctx is done), so no
// human answers a question whose command will not run. When the approval
// service cannot be told, the approval still ends at its own timeout.
func abandon(ctx context.Context, c Client, id string, timedOut bool) {
	reason := "the request that asked for it ended before anyone answered"
	if timedOut {
		reason = "the request that asked for it timed out before anyone answered"
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	_, _ = c.AbandonApproval(actx, &approvalv1.AbandonApprovalRequest{Id: id, Reason: reason})
}

// callerGone reports whether a wait that ended in err ended because its
// caller did: ctx is done, or its deadline passed. The approval service
// knows the deadline too and may end the stream with DEADLINE_EXCEEDED an
// instant before ctx's own timer fires.
func callerGone(ctx context.Context, err error) bool {
	return ctx.Err() != nil || timedOut(ctx, err)
}

// timedOut reports whether ctx's deadline ended the wait.
func timedOut(ctx context.Context, err error) bool {
	d, ok := ctx.Deadline()
	return errors.Is(ctx.Err(), context.DeadlineExceeded) || ok && (!time.Now().Before(d) || status.Code(err) == codes.DeadlineExceeded)
}

// allowed is the verdict of an allow. Where the policy judged the
// command's structure the judged plan is what runs; an allow under
// security allowlist that comes without one cannot be run as judged and
// is refused.
func allowed(resp *approvalv1.AuthorizeResponse, a *approvalv1.Approval) Verdict {
	if resp.GetSecurity() != approvalv1.Security_SECURITY_FULL && resp.GetPlan() == "" {
		return Verdict{Reason: policy.ErrNotAllowed + ": the approval service sent no plan to run", Approval: a}
	}
	return Verdict{Allowed: true, Plan: resp.GetPlan(), Approval: a}
}

// prepare resolves the command's programs and their digests into areq; a
// non-empty result is the reason to refuse.
func prepare(areq *approvalv1.AuthorizeRequest, req Request) string {
	if req.Resolver == nil {
		return ""
	}
	cwd := req.Binding.GetCwd()
	if cwd == "" {
		cwd = "/"
	}
	areq.Segments = Segments(req.Binding.GetCommand(), cwd, req.Home, req.Resolver)
	// What the resolver did not find is not to be found elsewhere.
	areq.Resolved = true
	if req.Digest == nil {
		return ""
	}
	for _, seg := range areq.Segments {
		d, err := req.Digest(seg.GetResolvedPath())
		if err != nil {
			// A file that cannot be hashed cannot be bound to: refuse
			// rather than approve unknown content.
			return policy.ErrNotAllowed + ": " + err.Error()
		}
		seg.ContentDigest = d
	}
	return ""
}

// wait follows the approval until it is terminal, reopening the stream
// when it drops: WatchApproval starts from the current state, so nothing
// is missed.
func wait(ctx context.Context, c Client, id string) (*approvalv1.Approval, error) {
	backoff := 50 * time.Millisecond
	for {
		a, err := follow(ctx, c, id)
		if a != nil {
			return a, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("gate: wait for approval %s: %w", id, ctx.Err())
		}
		// Only a lost connection is worth another try; anything else
		// (not found, permission denied) will not change.
		if status.Code(err) != codes.Unavailable {
			return nil, fmt.Errorf("gate: wait for approval %s: %w", id, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("gate: wait for approval %s: %w", id, ctx.Err())
		case <-t.C:
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// follow reads one stream; it returns the terminal approval, or the error
// that ended the stream.
func follow(ctx context.Context, c Client, id string) (*approvalv1.Approval, error) {
	stream, err := c.WatchApproval(ctx, &approvalv1.WatchApprovalRequest{Id: id})
	if err != nil {
		return nil, err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				return nil, status.Error(codes.Unavailable, "watch ended early")
			}
			return nil, err
		}
		if a := msg.GetApproval(); a.GetState() != approvalv1.ApprovalState_APPROVAL_STATE_PENDING {
			return a, nil
		}
	}
}

// EgressClient is the part of the approval service a network ask uses.
type EgressClient interface {
	Client
	AuthorizeEgress(ctx context.Context, in *approvalv1.AuthorizeEgressRequest, opts ...grpc.CallOption) (*approvalv1.AuthorizeEgressResponse, error)
}

var _ EgressClient = approvalv1.ApprovalServiceClient(nil)

// CheckEgress asks the approval service whether a sandbox may connect to
// a host its network allowlist misses, waiting for a human's answer or the
// timeout when one is needed. The verdict's Approval is the answered one,
// if any: its decision says whether the host was allowed always.
func CheckEgress(ctx context.Context, c EgressClient, req *approvalv1.AuthorizeEgressRequest) (Verdict, error) {
	resp, err := c.AuthorizeEgress(ctx, req)
	if err != nil {
		return Verdict{}, fmt.Errorf("gate: authorize egress: %w", err)
	}
	switch resp.GetDecision() {
	case approvalv1.PolicyDecision_POLICY_DECISION_ALLOW:
		return Verdict{Allowed: true}, nil
	case approvalv1.PolicyDecision_POLICY_DECISION_ASK:
	default:
		return Verdict{Reason: resp.GetReason()}, nil
	}
	final, err := wait(ctx, c, resp.GetApproval().GetId())
	if err != nil {
		if callerGone(ctx, err) {
			abandon(ctx, c, resp.GetApproval().GetId(), timedOut(ctx, err))
		}
		return Verdict{}, err
	}
	if final.GetState() == approvalv1.ApprovalState_APPROVAL_STATE_ALLOWED {
		return Verdict{Allowed: true, Approval: final}, nil
	}
	reason := "denied by " + final.GetResolvedBy()
	if final.GetState() == approvalv1.ApprovalState_APPROVAL_STATE_EXPIRED {
		reason = "nobody answered in time"
	}
	return Verdict{Reason: reason, Approval: final}, nil
}
