// Package nodes is the executor's side of a paired node's connection: the
// node (a machine of the account's own, running conch node) holds a
// stream open through the router; commands go down it and their output
// comes back, and the exec policy resolves programs on the node's own
// filesystem through it. Which executor holds which node is the
// executor's registry's, not this package's.
package nodes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Waits on a node that stops answering.
const (
	resolveTimeout = 10 * time.Second
	killGrace      = 10 * time.Second
)

// Conn is a paired node attached to this executor: the router passed its
// stream on after checking its token.
type Conn struct {
	// Account and Name are the node's; Platform what it said it runs;
	// ID names this connection among the node's.
	Account, Name, Platform, ID string
	workdir                     string // where commands start
	stream                      executorv1.ExecutorService_AttachNodeServer

	sendMu sync.Mutex

	mu      sync.Mutex
	waiters map[string]chan *executorv1.AttachNodeRequest // request id → its messages
	closed  bool
	why     error // why the connection was closed from this side
	done    chan struct{}
}

func (c *Conn) send(m *executorv1.AttachNodeResponse) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.stream.Send(m); err != nil {
		return fmt.Errorf("node %s: %w", c.Name, err)
	}
	return nil
}

// wait registers a request and returns its message channel, closed when
// the node goes away; stop forgets it.
func (c *Conn) wait(id string) (<-chan *executorv1.AttachNodeRequest, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, errs.New(errs.Unavailable, "node %s disconnected", c.Name)
	}
	ch := make(chan *executorv1.AttachNodeRequest, 64)
	c.waiters[id] = ch
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if w, ok := c.waiters[id]; ok && w == ch {
			delete(c.waiters, id)
		}
	}, nil
}

// deliver passes a node's message to the request it answers. A message
// for no request (it was forgotten) is dropped.
func (c *Conn) deliver(id string, m *executorv1.AttachNodeRequest) {
	c.mu.Lock()
	ch := c.waiters[id]
	c.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- m:
	case <-c.done:
	}
}

// Close ends the connection for why, which the node is told.
func (c *Conn) Close(why error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed, c.why = true, why
	close(c.done)
	for id, ch := range c.waiters {
		close(ch)
		delete(c.waiters, id)
	}
}

// Dir is where a command with workdir starts on the node.
func (c *Conn) Dir(workdir string) string {
	if filepath.IsAbs(workdir) {
		return workdir
	}
	return filepath.Join(c.workdir, workdir)
}

// Resolver resolves program names on a node for the exec policy, and keeps
// the digests the node reported for the approval's binding.
type Resolver struct {
	ctx         context.Context
	c           *Conn
	pathPrepend []string

	mu      sync.Mutex
	digests map[string]string
}

// Resolver returns a resolver of programs on the node, for a command with
// pathPrepend, asking within ctx.
func (c *Conn) Resolver(ctx context.Context, pathPrepend []string) *Resolver {
	return &Resolver{ctx: ctx, c: c, pathPrepend: pathPrepend, digests: map[string]string{}}
}

func (r *Resolver) LookPath(name, dir string) (string, error) {
	id := "r-" + randomID()
	ch, stop, err := r.c.wait(id)
	if err != nil {
		return "", err
	}
	defer stop()
	if err := r.c.send(&executorv1.AttachNodeResponse{Message: &executorv1.AttachNodeResponse_Resolve{Resolve: &executorv1.NodeResolve{
		RequestId: id, Name: name, Dir: dir, PathPrepend: r.pathPrepend,
	}}}); err != nil {
		return "", err
	}
	t := time.NewTimer(resolveTimeout)
	defer t.Stop()
	select {
	case m, ok := <-ch:
		if !ok {
			return "", errs.New(errs.Unavailable, "node %s disconnected", r.c.Name)
		}
		res := m.GetResolved()
		if res.GetPath() == "" {
			return "", policy.ErrNotFound
		}
		if res.GetError() == "" {
			r.mu.Lock()
			r.digests[res.GetPath()] = res.GetDigest()
			r.mu.Unlock()
		}
		return res.GetPath(), nil
	case <-t.C:
		return "", fmt.Errorf("node %s did not answer in %v", r.c.Name, resolveTimeout)
	case <-r.ctx.Done():
		return "", r.ctx.Err()
	}
}

// Digest returns the digest the node reported for path.
func (r *Resolver) Digest(path string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.digests[path]
	if !ok {
		return "", fmt.Errorf("node %s could not read %s", r.c.Name, path)
	}
	return d, nil
}

// Proc is a command running on a node.
type Proc struct {
	c    *Conn
	id   string
	stop func()

	done     chan struct{}
	exit     sandbox.Exit
	killOnce sync.Once
	endOnce  sync.Once
}

// Start sends a command to the node, stopped after timeout; the node
// streams its output back.
func (c *Conn) Start(timeout time.Duration, o sandbox.Options) (*Proc, error) {
	id := "n-" + randomID()
	ch, stop, err := c.wait(id)
	if err != nil {
		return nil, err
	}
	np := &Proc{c: c, id: id, stop: stop, done: make(chan struct{})}
	cmd := &executorv1.NodeCommand{RequestId: id, OutputBudget: o.Budget, Exec: &executorv1.ExecRequest{
		Command: o.Command, Workdir: o.Workdir, Env: o.Env, Pty: o.Pty,
		TimeoutSeconds: int32(timeout / time.Second),
	}}
	if len(o.PathPrepend) > 0 {
		cmd.Exec.Settings = &approvalv1.ExecSettings{PathPrepend: o.PathPrepend}
	}
	if err := c.send(&executorv1.AttachNodeResponse{Message: &executorv1.AttachNodeResponse_Command{Command: cmd}}); err != nil {
		stop()
		return nil, err
	}
	go np.follow(ch, o.OnOutput)
	return np, nil
}

func (p *Proc) follow(ch <-chan *executorv1.AttachNodeRequest, onOutput func(sandbox.Stream, []byte)) {
	for m := range ch {
		ev := m.GetEvent().GetEvent()
		switch {
		case ev.GetOutput() != nil:
			st := sandbox.Stdout
			if ev.GetOutput().GetStream() == executorv1.StreamName_STREAM_NAME_STDERR {
				st = sandbox.Stderr
			}
			if onOutput != nil {
				onOutput(st, ev.GetOutput().GetData())
			}
		case ev.GetFinished() != nil:
			f := ev.GetFinished()
			x := sandbox.Exit{Code: -1, StdoutDropped: f.GetStdoutTruncated(), StderrDropped: f.GetStderrTruncated()}
			switch f.GetOutcome().GetType() {
			case executorv1.OutcomeType_OUTCOME_TYPE_EXIT:
				x.Code = int(f.GetOutcome().GetExitCode())
			default:
				x.Err = errors.New(f.GetError())
				if f.GetError() == "" {
					x.Err = fmt.Errorf("node %s: the command failed", p.c.Name)
				}
			}
			p.end(x)
			return
		}
	}
	p.end(sandbox.Exit{Code: -1, Err: fmt.Errorf("node %s disconnected while the command ran", p.c.Name)})
}

func (p *Proc) end(x sandbox.Exit) {
	p.endOnce.Do(func() {
		p.exit = x
		p.stop()
		close(p.done)
	})
}

// Done is closed when the command ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exit is how it ended, once Done is closed.
func (p *Proc) Exit() sandbox.Exit { return p.exit }

// Kill asks the node to kill the command's tree; a node that does not
// confirm in time is taken as having failed.
func (p *Proc) Kill() error {
	p.killOnce.Do(func() {
		err := p.c.send(&executorv1.AttachNodeResponse{Message: &executorv1.AttachNodeResponse_Cancel{Cancel: p.id}})
		go func() {
			t := time.NewTimer(killGrace)
			defer t.Stop()
			select {
			case <-p.done:
			case <-t.C:
				p.end(sandbox.Exit{Code: -1, Err: fmt.Errorf("node %s did not confirm the kill (%v)", p.c.Name, err)})
			}
		}()
	})
	return nil
}

// Write refuses: a node's commands take no input.
func (p *Proc) Write([]byte, bool) error {
	return errors.New("standard input is not available for commands on a node")
}

// New is the connection of the node whose stream said hello, for account;
// a hello with a bad name or working directory is refused.
func New(account string, hello *executorv1.NodeHello, stream executorv1.ExecutorService_AttachNodeServer) (*Conn, error) {
	if !placement.NodeName.MatchString(hello.GetName()) {
		return nil, errs.New(errs.InvalidArgument, "hello.name: must be 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit")
	}
	if wd := hello.GetWorkdir(); !filepath.IsAbs(wd) || strings.ContainsRune(wd, 0) || len(wd) > 4096 {
		return nil, errs.New(errs.InvalidArgument, "hello.workdir: must be an absolute path")
	}
	platform := hello.GetPlatform()
	if len(platform) > 64 {
		platform = platform[:64] + "…"
	}
	return &Conn{
		Account: account, Name: hello.GetName(), Platform: platform, ID: randomID(),
		workdir: filepath.Clean(hello.GetWorkdir()),
		stream:  stream, waiters: map[string]chan *executorv1.AttachNodeRequest{}, done: make(chan struct{}),
	}, nil
}

// Serve passes the node's answers to the commands and resolves waiting
// for them until the stream ends, the connection is closed (its why is
// returned) or ctx ends.
func (c *Conn) Serve(ctx context.Context) error {
	msgs := make(chan *executorv1.AttachNodeRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := c.stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-c.done:
				return
			}
		}
	}()
	for {
		select {
		case m := <-msgs:
			switch {
			case m.GetEvent() != nil:
				c.deliver(m.GetEvent().GetRequestId(), m)
			case m.GetResolved() != nil:
				c.deliver(m.GetResolved().GetRequestId(), m)
			default:
				return errs.New(errs.InvalidArgument, "a node may say hello only once")
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-c.done:
			c.mu.Lock()
			why := c.why
			c.mu.Unlock()
			return why
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// randomID is 16 random hexadecimal digits.
func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
