package gate_test

import (
	"context"
	"fmt"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	"github.com/conch-sh/conch/services/approval/gate"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/internal/execpolicy"
)

// An executor asks before running a command on host gateway, resolving
// programs along the PATH the command will run with and telling the user
// while a human decides.
func ExampleCheck() {
	run := func(ctx context.Context, client gate.Client, command, cwd string, settings *approvalv1.ExecSettings) error {
		host := approvalv1.Host_HOST_GATEWAY
		if !execpolicy.Needed(host, settings) {
			return nil
		}
		v, err := gate.Check(ctx, client, gate.Request{
			Binding:   &approvalv1.Binding{Command: command, Cwd: cwd, Host: host, Agent: "default", Session: "chat-1"},
			Settings:  settings,
			Resolver:  policy.PathResolver{Path: policy.SplitPath(policy.DefaultPath)},
			Digest:    gate.FileDigest,
			OnPending: func(a *approvalv1.Approval) { fmt.Println("waiting for approval", a.GetId()) },
		})
		if err != nil {
			return err
		}
		if !v.Allowed {
			return fmt.Errorf("%s", v.Reason)
		}
		return nil // run the command now
	}
	_ = run
}
