package approval

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/store"
	"github.com/conch-sh/conch/services/internal/audit"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
)

// Every verdict and approval event of the service is a record: the ask,
// the approval created, answered by the authenticated key, used; a
// refusal; an approval that expired and one abandoned. Evaluate is not.
func TestAuditRecordsVerdictsAndApprovalEvents(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	st, err := store.New(cli, KeyPrefix, sealtest.Keyring(t))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := audit.NewWriter(audit.Config{Store: objs, Etcd: cli, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(st, Options{Audit: w})
	if err != nil {
		t.Fatal(err)
	}
	ctx := tenant.With(t.Context(), tenant.Scope{Account: "acct", Session: "s1", Key: "key-test", Surface: "cli"})

	resolved := segs("rm", "/usr/bin/rm")
	req := &approvalv1.AuthorizeRequest{Binding: binding("rm -rf build"), Segments: resolved, Settings: gatewaySettings}
	resp, err := s.Authorize(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetApproval().GetId()
	if _, err := s.ResolveApproval(ctx, &approvalv1.ResolveApprovalRequest{Id: id, Decision: approvalv1.ApprovalDecision_APPROVAL_DECISION_ALLOW_ONCE}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: req.Binding, Segments: resolved, Settings: gatewaySettings, ApprovalId: id}); err != nil {
		t.Fatal(err)
	}
	// The approval used for another command: a refusal.
	if _, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("rm -rf /"), Segments: resolved, Settings: gatewaySettings, ApprovalId: id}); err == nil {
		t.Fatal("an approval was used for another command")
	}
	// Refused by the policy.
	if _, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("ls > out"), Segments: segs("ls", "/usr/bin/ls"), Settings: gatewaySettings}); err != nil {
		t.Fatal(err)
	}
	// Abandoned by its requester.
	resp, err = s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("rm a"), Segments: resolved, Settings: gatewaySettings})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AbandonApproval(ctx, &approvalv1.AbandonApprovalRequest{Id: resp.GetApproval().GetId(), Reason: "the request ended"}); err != nil {
		t.Fatal(err)
	}
	// Expired: nobody answered in time.
	short := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY, ApprovalTimeoutSeconds: 1}
	resp, err = s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("rm b"), Segments: resolved, Settings: short})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = s.store.Watch(wctx, "acct", resp.GetApproval().GetId(), func(a *store.Approval) bool { return a.State == store.StatePending })
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("rm b"), Segments: resolved, Settings: short, ApprovalId: resp.GetApproval().GetId()}); err != nil {
		t.Fatal(err)
	}
	// A dry run is not recorded.
	if _, err := s.Evaluate(ctx, &approvalv1.EvaluateRequest{Command: "rm -rf build", Agent: "default"}); err != nil {
		t.Fatal(err)
	}

	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, _, err := audit.Read(ctx, objs, audit.Query{Accounts: []string{"acct"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		line := fmt.Sprintf("%s %s%s %s %q by=%s/%s", r.Kind, r.Event, r.Decision, r.Command, r.Reason, r.ResolvedBy, r.Surface)
		got = append(got, line)
		if r.Account != "acct" || r.Session != "s1" || r.Gateway != "default" || r.Host != "gateway" || r.Cwd != "/home/workspace" {
			t.Errorf("record without its context: %+v", r)
		}
	}
	// An approval is created before the verdict that asks for it returns.
	want := []string{
		`approval created rm -rf build "" by=/`,
		`command ask rm -rf build "allowlist miss: Command not allowed by exec policy (/usr/bin/rm is not in the allowlist)" by=/`,
		`approval resolvedallow-once rm -rf build "" by=key:key-test/cli`,
		`command allow rm -rf build "approved: allowed by key:key-test via cli" by=key:key-test/cli`,
		`command deny rm -rf / "approval`,
		`command deny ls > out "Unsupported shell token: >" by=/`,
		`approval created rm a "" by=/`,
		`command ask rm a "allowlist miss: Command not allowed by exec policy (/usr/bin/rm is not in the allowlist)" by=/`,
		`approval abandoned rm a "the request ended" by=requester/`,
		`approval created rm b "" by=/`,
		`command ask rm b "allowlist miss: Command not allowed by exec policy (/usr/bin/rm is not in the allowlist)" by=/`,
		`approval expired rm b "nobody answered before the approval timeout" by=fallback/`,
		`command deny rm b "Approval timeout" by=fallback/`,
	}
	if len(got) != len(want) {
		t.Fatalf("records:\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("record %d = %s\nwant prefix %s", i, got[i], want[i])
		}
	}
	if rep, err := audit.Verify(ctx, objs, cli, "", "acct"); err != nil || rep.Problem != nil {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// Executors append only runs, and only of the account they call for.
func TestRecordRunsTakesOnlyTheCallersRuns(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	objs, err := fsstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	w, err := audit.NewWriter(audit.Config{Store: objs, Etcd: cli, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuditServer(objs, cli, "", nil, w)
	if err != nil {
		t.Fatal(err)
	}
	ctx := tenant.With(t.Context(), tenant.Scope{Account: "acct"})
	for _, tc := range []struct {
		name string
		rec  *approvalv1.AuditRecord
		want string
	}{
		{"a verdict", &approvalv1.AuditRecord{Kind: audit.KindCommand, Account: "acct", Decision: "allow"}, "records[0].kind"},
		{"another account", &approvalv1.AuditRecord{Kind: audit.KindOutcome, Account: "other"}, "records[0].account"},
	} {
		if _, err := a.RecordRuns(ctx, &approvalv1.RecordRunsRequest{Records: []*approvalv1.AuditRecord{tc.rec}}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := a.RecordRuns(ctx, &approvalv1.RecordRunsRequest{Sync: true, Records: []*approvalv1.AuditRecord{
		{Kind: audit.KindOutcome, Account: "acct", Command: "true", Outcome: &approvalv1.AuditOutcome{ExitCode: 0}, Hash: "forged", Seq: 7},
	}}); err != nil {
		t.Fatal(err)
	}
	recs, _, err := audit.Read(ctx, objs, audit.Query{Accounts: []string{"acct"}})
	if err != nil || len(recs) != 1 || recs[0].Seq != 1 || recs[0].Hash == "forged" {
		t.Fatalf("stored: %+v %v", recs, err)
	}
}

// In sync mode (exec.audit) a call succeeds only once its records are
// stored: a full buffer is written to make room, every record of a call
// is stored or none is reported, and a store that is down fails the call
// with an error naming the audit trail.
func TestSyncAuditFailsTheCallNotTheTrail(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	st, err := store.New(cli, KeyPrefix, sealtest.Keyring(t))
	if err != nil {
		t.Fatal(err)
	}
	synced := &approvalv1.ExecSettings{Host: approvalv1.Host_HOST_GATEWAY, Audit: audit.Sync}
	outcome := func(cmd string) *approvalv1.AuditRecord {
		return &approvalv1.AuditRecord{Kind: audit.KindOutcome, Account: "acct", Command: cmd, Outcome: &approvalv1.AuditOutcome{}}
	}
	egress := func(cmd string) *approvalv1.AuditRecord {
		return &approvalv1.AuditRecord{Kind: audit.KindEgress, Account: "acct", Command: cmd, Egress: &approvalv1.AuditEgress{Host: "example.org", Port: 443}}
	}
	tests := []struct {
		name      string
		storeDown bool
		// call makes the call in sync mode; want is the commands of the
		// records it must have stored when it returns nil.
		call func(ctx context.Context, s *Server, a *AuditServer) error
		want []string
	}{
		{name: "a verdict, buffer full", call: func(ctx context.Context, s *Server, _ *AuditServer) error {
			_, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("ls"), Segments: segs("ls", "/usr/bin/ls"), Settings: synced})
			return err
		}, want: []string{"ls"}},
		{name: "an outcome and its connections, buffer full", call: func(ctx context.Context, _ *Server, a *AuditServer) error {
			_, err := a.RecordRuns(ctx, &approvalv1.RecordRunsRequest{Sync: true, Records: []*approvalv1.AuditRecord{outcome("curl"), egress("curl"), egress("curl")}})
			return err
		}, want: []string{"curl", "curl", "curl"}},
		{name: "a verdict, store down", storeDown: true, call: func(ctx context.Context, s *Server, _ *AuditServer) error {
			_, err := s.Authorize(ctx, &approvalv1.AuthorizeRequest{Binding: binding("ls"), Segments: segs("ls", "/usr/bin/ls"), Settings: synced})
			return err
		}},
		{name: "an outcome, store down", storeDown: true, call: func(ctx context.Context, _ *Server, a *AuditServer) error {
			_, err := a.RecordRuns(ctx, &approvalv1.RecordRunsRequest{Sync: true, Records: []*approvalv1.AuditRecord{outcome("true")}})
			return err
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "trail")
			objs, err := fsstore.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			prefix := fmt.Sprintf("/sync%d/", i)
			w, err := audit.NewWriter(audit.Config{Store: objs, Etcd: cli, EtcdPrefix: prefix, Name: "test", MaxBuffered: 3})
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(st, Options{Audit: w})
			if err != nil {
				t.Fatal(err)
			}
			a, err := NewAuditServer(objs, cli, prefix, s, w)
			if err != nil {
				t.Fatal(err)
			}
			ctx := tenant.With(t.Context(), tenant.Scope{Account: "acct", Session: "s1"})
			// Three connections of asynchronous commands fill the buffer.
			if _, err := a.RecordRuns(ctx, &approvalv1.RecordRunsRequest{Records: []*approvalv1.AuditRecord{egress("async"), egress("async"), egress("async")}}); err != nil {
				t.Fatal(err)
			}
			if w.Buffered() != 3 {
				t.Fatalf("%d records buffered, want 3", w.Buffered())
			}
			if tc.storeDown {
				if err := os.Rename(dir, dir+".away"); err != nil {
					t.Fatal(err)
				}
				err := tc.call(ctx, s, a)
				if err == nil || errs.KindOf(err) != errs.Unavailable || !strings.Contains(err.Error(), "audit trail") {
					t.Fatalf("a sync call with the store down = %v, want Unavailable naming the audit trail", err)
				}
				return
			}
			if err := tc.call(ctx, s, a); err != nil {
				t.Fatal(err)
			}
			recs, _, err := audit.Read(ctx, objs, audit.Query{Accounts: []string{"acct"}})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range recs {
				if r.Command != "async" {
					got = append(got, r.Command)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("stored when the call returned: %q, want %q", got, tc.want)
			}
		})
	}
}
