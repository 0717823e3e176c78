// Package nodeagent is `conch node`: it pairs this machine with a conch
// cluster. It connects out to a router over one long-lived gRPC stream
// (ExecutorService.AttachNode), so the machine needs no inbound port, and
// runs the commands the cluster addresses to it by name with package
// hostexec. The cluster's exec policy and approvals decide what reaches
// it; the agent resolves program names on this machine for that policy.
package nodeagent

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/approval/gate"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/executor/hostexec"
	"github.com/conch-sh/conch/services/executor/sandbox"
)

// Options configure a node.
type Options struct {
	// Join is the router's address: https://host[:port] (TLS),
	// http://host:port or host:port (plaintext, for a local cluster).
	Join string
	// Name is the node's paired name; Token its pairing token.
	Name, Token string
	// Workdir is where commands start and their HOME.
	Workdir string
	// Logger receives connection events; nil means slog.Default().
	Logger *slog.Logger
}

// Reconnection backoff bounds.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Run keeps the node connected until ctx ends, reconnecting with backoff
// after a lost connection. A refused token or name ends it with an error.
func Run(ctx context.Context, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	target, creds, err := dialTarget(opts.Join)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}))
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	defer conn.Close()
	client := executorv1.NewExecutorServiceClient(conn)
	backoff := minBackoff
	for {
		start := time.Now()
		err := session(ctx, client, opts)
		if ctx.Err() != nil {
			return nil
		}
		switch status.Code(err) {
		case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument:
			return fmt.Errorf("node: the cluster refused this node: %s", status.Convert(err).Message())
		}
		if time.Since(start) > time.Minute {
			backoff = minBackoff
		}
		opts.Logger.Warn("node connection lost; reconnecting", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// dialTarget turns --join into a gRPC target and credentials.
func dialTarget(join string) (string, credentials.TransportCredentials, error) {
	if !strings.Contains(join, "://") {
		return join, insecure.NewCredentials(), nil
	}
	u, err := url.Parse(join)
	if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return "", nil, fmt.Errorf("node: --join %q: want https://host[:port], http://host:port or host:port", join)
	}
	switch u.Scheme {
	case "https":
		host := u.Host
		if u.Port() == "" {
			host += ":443"
		}
		return host, credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12}), nil
	case "http":
		return u.Host, insecure.NewCredentials(), nil
	}
	return "", nil, fmt.Errorf("node: --join %q: scheme must be https or http", join)
}

// node is one connection's state.
type node struct {
	stream executorv1.ExecutorService_AttachNodeClient
	runner *hostexec.Runner
	log    *slog.Logger

	sendMu sync.Mutex

	mu    sync.Mutex
	procs map[string]*hostexec.Process
}

func (n *node) send(m *executorv1.AttachNodeRequest) error {
	n.sendMu.Lock()
	defer n.sendMu.Unlock()
	return n.stream.Send(m)
}

func session(ctx context.Context, client executorv1.ExecutorServiceClient, opts Options) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.AttachNode(ctx)
	if err != nil {
		return err
	}
	n := &node{stream: stream, runner: &hostexec.Runner{Dir: opts.Workdir}, log: opts.Logger, procs: map[string]*hostexec.Process{}}
	defer n.killAll()
	if err := n.send(&executorv1.AttachNodeRequest{Message: &executorv1.AttachNodeRequest_Hello{Hello: &executorv1.NodeHello{
		Name: opts.Name, Token: opts.Token, Platform: runtime.GOOS + "/" + runtime.GOARCH, Workdir: opts.Workdir,
	}}}); err != nil {
		return err
	}
	opts.Logger.Info("node connected", "join", opts.Join, "name", opts.Name)
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		switch {
		case m.GetCommand() != nil:
			go n.run(m.GetCommand())
		case m.GetCancel() != "":
			n.mu.Lock()
			p := n.procs[m.GetCancel()]
			n.mu.Unlock()
			if p != nil {
				_ = p.Kill()
			}
		case m.GetResolve() != nil:
			go n.resolve(m.GetResolve())
		}
	}
}

func (n *node) killAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.procs {
		_ = p.Kill()
	}
}

// resolve answers which binary a program name runs here, with its digest.
func (n *node) resolve(r *executorv1.NodeResolve) {
	path := append(append([]string(nil), r.GetPathPrepend()...), policy.SplitPath(hostexec.DefaultPath)...)
	res := &executorv1.NodeResolved{RequestId: r.GetRequestId()}
	dir := r.GetDir()
	if dir == "" {
		dir = n.runner.Dir
	}
	if p, err := (policy.PathResolver{Path: path}).LookPath(r.GetName(), dir); err == nil {
		res.Path = p
		if d, err := gate.FileDigest(p); err == nil {
			res.Digest = d
		} else {
			res.Error = err.Error()
		}
	} else {
		res.Error = err.Error()
	}
	if err := n.send(&executorv1.AttachNodeRequest{Message: &executorv1.AttachNodeRequest_Resolved{Resolved: res}}); err != nil {
		n.log.Warn("answering a resolve failed", "error", err)
	}
}

func (n *node) event(id string, ev *executorv1.ExecResponse) error {
	return n.send(&executorv1.AttachNodeRequest{Message: &executorv1.AttachNodeRequest_Event{Event: &executorv1.NodeEvent{RequestId: id, Event: ev}}})
}

// run runs one command and streams its events; the cluster enforces the
// output cap, the node drains what is beyond the budget.
func (n *node) run(c *executorv1.NodeCommand) {
	id, req := c.GetRequestId(), c.GetExec()
	finish := func(f *executorv1.Finished) {
		if err := n.event(id, &executorv1.ExecResponse{Event: &executorv1.ExecResponse_Finished{Finished: f}}); err != nil {
			n.log.Warn("sending a command's end failed", "error", err)
		}
	}
	p, err := n.runner.Start(sandbox.Options{
		Command: req.GetCommand(), Workdir: req.GetWorkdir(), Env: req.GetEnv(), Pty: req.GetPty(),
		Budget: c.GetOutputBudget(), PathPrepend: req.GetSettings().GetPathPrepend(),
		OnOutput: func(st sandbox.Stream, b []byte) {
			name := executorv1.StreamName_STREAM_NAME_STDOUT
			if st == sandbox.Stderr {
				name = executorv1.StreamName_STREAM_NAME_STDERR
			}
			_ = n.event(id, &executorv1.ExecResponse{Event: &executorv1.ExecResponse_Output{Output: &executorv1.Output{Stream: name, Data: b}}})
		},
	})
	if err != nil {
		finish(&executorv1.Finished{Outcome: &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_ERROR}, Error: err.Error()})
		return
	}
	n.mu.Lock()
	n.procs[id] = p
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.procs, id)
		n.mu.Unlock()
	}()
	// The cluster times the command out; this is the backstop should the
	// cluster's kill never arrive.
	var backstop <-chan time.Time
	if t := req.GetTimeoutSeconds(); t > 0 {
		timer := time.NewTimer(time.Duration(t)*time.Second + time.Minute)
		defer timer.Stop()
		backstop = timer.C
	}
	select {
	case <-p.Done():
	case <-backstop:
		_ = p.Kill()
		<-p.Done()
	}
	x := p.Exit()
	f := &executorv1.Finished{StdoutTruncated: x.StdoutDropped, StderrTruncated: x.StderrDropped}
	if x.Err != nil {
		f.Outcome, f.Error = &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_ERROR}, x.Err.Error()
	} else {
		code := int32(x.Code)
		f.Outcome = &executorv1.Outcome{Type: executorv1.OutcomeType_OUTCOME_TYPE_EXIT, ExitCode: &code}
	}
	finish(f)
}
