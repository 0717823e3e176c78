package approval

import (
	"cmp"
	"context"
	"errors"
	"path"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/document"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// Defaults of ReplayPolicy.
const (
	defaultReplayWindow   = 7 * 24 * time.Hour
	defaultReplayExamples = 20
	maxReplayExamples     = 1000
)

// ReplayPolicy implements AuditService: every command of the trail is
// judged twice by the engine, under the current document and the settings
// it was judged under (the baseline, so the diff shows only the proposal's
// effect), and under the proposal. Programs resolve as they resolved when
// the command was judged; a command the approval service never judged (a
// sandbox command under the full/off default) resolves along the
// service's PATH.
func (a *AuditServer) ReplayPolicy(ctx context.Context, req *approvalv1.ReplayPolicyRequest) (*approvalv1.ReplayPolicyResponse, error) {
	if a.judge == nil {
		return nil, errs.New(errs.Unimplemented, "policy replay: no policy engine here")
	}
	account, err := tenant.Account(ctx)
	if err != nil {
		return nil, err
	}
	examples := int(req.GetMaxExamples())
	switch {
	case examples < 0 || examples > maxReplayExamples:
		return nil, errs.New(errs.InvalidArgument, "max_examples: at most %d", maxReplayExamples)
	case examples == 0:
		examples = defaultReplayExamples
	}
	current, _, err := a.judge.store.CachedDocument(ctx, account)
	if err != nil {
		return nil, err
	}
	proposed := current
	if req.GetDocument() != nil {
		b, err := req.GetDocument().MarshalJSON()
		if err != nil {
			return nil, errs.Wrap(errs.InvalidArgument, err, "document")
		}
		proposed, err = document.Parse(b)
		var inv *document.InvalidError
		if errors.As(err, &inv) {
			return nil, errs.New(errs.InvalidArgument, "document: %s", inv.Error())
		}
		if err != nil {
			return nil, err
		}
	}
	until := time.Now()
	if req.GetUntil() != nil {
		until = req.GetUntil().AsTime()
	}
	since := until.Add(-defaultReplayWindow)
	if req.GetSince() != nil {
		since = req.GetSince().AsTime()
	}
	if until.Before(since) {
		return nil, errs.New(errs.InvalidArgument, "until: before since")
	}
	recs, _, err := audit.Read(ctx, a.store, audit.Query{Accounts: []string{account}, Since: since, Until: until, Gateway: req.GetGateway()})
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "audit: read")
	}
	out := &approvalv1.ReplayPolicyResponse{Changes: []*approvalv1.ReplayChange{}, Programs: []*approvalv1.ReplayChange{}, Examples: []*approvalv1.ReplayExample{}}
	changes, programs := map[[3]string]int32{}, map[[3]string]int32{}
	for _, r := range replayable(recs) {
		in := judgeInput{command: r.Command, agent: r.Gateway, cwd: r.Cwd, host: hostByName(r.Host)}
		if len(r.Exec) > 0 {
			in.exec = &approvalv1.ExecSettings{}
			if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(r.Exec, in.exec); err != nil {
				in.exec = nil
			}
		}
		if r.Kind == audit.KindCommand {
			in.resolved = true
			for i, argv := range r.Argv {
				if i < len(r.ResolvedPaths) && r.ResolvedPaths[i] != "" && len(argv) > 0 {
					in.segments = append(in.segments, &approvalv1.Segment{Argv: argv[:1], ResolvedPath: r.ResolvedPaths[i]})
				}
			}
		}
		if in.cwd != "" && !path.IsAbs(in.cwd) {
			in.cwd = ""
		}
		before := a.judge.judgeDoc(current, in).res
		if req.GetGatewayExec() != nil {
			in.exec = req.GetGatewayExec()
		}
		after := a.judge.judgeDoc(proposed, in).res
		out.Commands++
		from, to := before.Decision.String(), after.Decision.String()
		if from == to {
			continue
		}
		out.Changed++
		changes[[3]string{from, to, ""}]++
		for _, p := range programsOf(after.Segments, r) {
			programs[[3]string{from, to, p}]++
		}
		if len(out.Examples) < examples {
			out.Examples = append(out.Examples, &approvalv1.ReplayExample{
				Time: timestamppb.New(r.Time), Gateway: r.Gateway, User: r.User, Command: r.Command, From: from, To: to, Reason: after.Reason,
			})
		}
	}
	out.Changes, out.Programs = changeList(changes), changeList(programs)
	return out, nil
}

// replayable picks the commands of recs, once each: the verdicts the
// approval service recorded (an approval's use repeats its ask, and is
// left out), and the runs it never judged, which only their outcome
// records.
func replayable(recs []audit.Record) []audit.Record {
	judged := map[[2]string]bool{}
	var out []audit.Record
	for _, r := range recs {
		if r.Kind == audit.KindCommand {
			judged[[2]string{r.TraceID, r.Command}] = true
			if r.ApprovalID == "" || r.Decision == "ask" {
				out = append(out, r)
			}
		}
	}
	for _, r := range recs {
		if r.Kind == audit.KindOutcome && r.Command != "" && !judged[[2]string{r.TraceID, r.Command}] {
			out = append(out, r)
		}
	}
	return out
}

// programsOf names the programs of a command once each: resolved paths,
// else the names of builtins and of programs that did not resolve, else
// the command's first word.
func programsOf(segs []policy.Segment, r audit.Record) []string {
	var out []string
	for _, seg := range segs {
		p := seg.ResolvedPath
		if p == "" && len(seg.Argv) > 0 {
			p = seg.Argv[0]
		}
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	switch {
	case len(out) > 0:
	case len(r.Argv) > 0 && len(r.Argv[0]) > 0:
		out = append(out, r.Argv[0][0])
	default:
		// Refused before any segment was judged: its first word.
		if f := strings.Fields(r.Command); len(f) > 0 {
			out = append(out, f[0])
		}
	}
	return out
}

func changeList(m map[[3]string]int32) []*approvalv1.ReplayChange {
	out := make([]*approvalv1.ReplayChange, 0, len(m))
	for k, n := range m {
		out = append(out, &approvalv1.ReplayChange{From: k[0], To: k[1], Program: k[2], Count: n})
	}
	slices.SortFunc(out, func(a, b *approvalv1.ReplayChange) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.From+a.To+a.Program, b.From+b.To+b.Program)
	})
	return out
}
