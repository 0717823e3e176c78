package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/approval/policy"
	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/internal/placement"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Waits on a node that stops answering.
const (
	nodeResolveTimeout = 10 * time.Second
	nodeKillGrace      = 10 * time.Second
)

// ErrNodeNotFound is the caller's answer for a node that is not connected
// (docs/how-to/hosts.md).
const ErrNodeNotFound = "Node not found"

// nodeConn is a paired node attached to this executor: the router passed
// its stream on after checking its token.
type nodeConn struct {
	account, name, platform, conn string
	workdir                       string // where commands start
	stream                        executorv1.ExecutorService_AttachNodeServer

	sendMu sync.Mutex

	mu      sync.Mutex
	waiters map[string]chan *executorv1.AttachNodeRequest // request id → its messages
	closed  bool
	why     error // why the connection was closed from this side
	done    chan struct{}
}

func (c *nodeConn) send(m *executorv1.AttachNodeResponse) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.stream.Send(m); err != nil {
		return fmt.Errorf("node %s: %w", c.name, err)
	}
	return nil
}

// wait registers a request and returns its message channel, closed when
// the node goes away; stop forgets it.
func (c *nodeConn) wait(id string) (<-chan *executorv1.AttachNodeRequest, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, errs.New(errs.Unavailable, "node %s disconnected", c.name)
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
func (c *nodeConn) deliver(id string, m *executorv1.AttachNodeRequest) {
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

// close ends the connection for why, which the node is told.
func (c *nodeConn) close(why error) {
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

// dir is where a command with workdir starts on the node.
func (c *nodeConn) dir(workdir string) string {
	if filepath.IsAbs(workdir) {
		return workdir
	}
	return filepath.Join(c.workdir, workdir)
}

func nodeKey(account, name string) string { return account + "/" + name }

// node returns account's node name if it is attached here; a node attached
// to another executor, or to none, is a clear error.
func (s *Service) node(ctx context.Context, account, name string) (*nodeConn, error) {
	if !placement.NodeName.MatchString(name) {
		return nil, errs.New(errs.NotFound, ErrNodeNotFound)
	}
	s.mu.Lock()
	c := s.nodes[nodeKey(account, name)]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	rec, ok, err := placement.Lookup(ctx, s.etcd, placement.NodeKey(account, name))
	if err == nil && ok && rec.Executor != s.name {
		return nil, errs.New(errs.Unavailable, "node %s is connected to executor %s; retry to reach it", name, rec.Executor)
	}
	return nil, errs.New(errs.NotFound, ErrNodeNotFound)
}

// recordNode writes c's placement record under the executor's lease. The
// newest connection of a name wins.
func (s *Service) recordNode(ctx context.Context, c *nodeConn, since time.Time) error {
	rec := placement.Record{Account: c.account, Executor: s.name, Addr: s.addr, Platform: c.platform, Created: since, Conn: c.conn}
	s.mu.Lock()
	lease := s.lease
	s.mu.Unlock()
	if _, err := s.etcd.Put(ctx, placement.NodeKey(c.account, c.name), rec.Encode(), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("executor: record node %s: %w", c.name, err)
	}
	return nil
}

// forgetNode removes c's record unless a newer connection replaced it.
func (s *Service) forgetNode(ctx context.Context, c *nodeConn) {
	key := placement.NodeKey(c.account, c.name)
	rec, ok, err := placement.Lookup(ctx, s.etcd, key)
	if err != nil || !ok || rec.Conn != c.conn {
		return
	}
	_, _ = s.etcd.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", rec.Encode())).Then(clientv3.OpDelete(key)).Commit()
}

// Attach serves a node's stream until it ends: it records the node, then
// passes the node's answers to the commands and resolves waiting for them.
func (s *Service) Attach(ctx context.Context, account string, stream executorv1.ExecutorService_AttachNodeServer) error {
	hello, err := placement.ReadHello(ctx, stream)
	if err != nil {
		return err
	}
	if !placement.NodeName.MatchString(hello.GetName()) {
		return errs.New(errs.InvalidArgument, "hello.name: must be 1-64 characters of [A-Za-z0-9._-], starting with a letter or digit")
	}
	if wd := hello.GetWorkdir(); !filepath.IsAbs(wd) || strings.ContainsRune(wd, 0) || len(wd) > 4096 {
		return errs.New(errs.InvalidArgument, "hello.workdir: must be an absolute path")
	}
	c := &nodeConn{
		account: account, name: hello.GetName(), platform: abbreviate(hello.GetPlatform(), 64), conn: randomID(),
		workdir: filepath.Clean(hello.GetWorkdir()),
		stream:  stream, waiters: map[string]chan *executorv1.AttachNodeRequest{}, done: make(chan struct{}),
	}
	since := time.Now().UTC()
	if err := s.recordNode(ctx, c, since); err != nil {
		return err
	}
	k := nodeKey(account, c.name)
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		s.forgetNode(context.WithoutCancel(ctx), c)
		return s.shuttingDown()
	}
	old := s.nodes[k]
	s.nodes[k] = c
	s.mu.Unlock()
	if old != nil {
		old.close(errs.New(errs.Conflict, "node %s connected again; this connection is replaced", c.name))
	}
	s.log.Info("node attached", "node", c.name, "account", account, "platform", c.platform)
	defer func() {
		s.mu.Lock()
		if s.nodes[k] == c {
			delete(s.nodes, k)
		}
		s.mu.Unlock()
		c.close(nil)
		s.forgetNode(context.WithoutCancel(ctx), c)
		s.log.Info("node detached", "node", c.name, "account", account)
	}()
	msgs := make(chan *executorv1.AttachNodeRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
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

// resolver resolves program names on a node for the exec policy, and keeps
// the digests the node reported for the approval's binding.
type nodeResolver struct {
	ctx         context.Context
	c           *nodeConn
	pathPrepend []string

	mu      sync.Mutex
	digests map[string]string
}

func (r *nodeResolver) LookPath(name, dir string) (string, error) {
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
	t := time.NewTimer(nodeResolveTimeout)
	defer t.Stop()
	select {
	case m, ok := <-ch:
		if !ok {
			return "", errs.New(errs.Unavailable, "node %s disconnected", r.c.name)
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
		return "", fmt.Errorf("node %s did not answer in %v", r.c.name, nodeResolveTimeout)
	case <-r.ctx.Done():
		return "", r.ctx.Err()
	}
}

// Digest returns the digest the node reported for path.
func (r *nodeResolver) Digest(path string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.digests[path]
	if !ok {
		return "", fmt.Errorf("node %s could not read %s", r.c.name, path)
	}
	return d, nil
}

// nodeProc is a command running on a node.
type nodeProc struct {
	c    *nodeConn
	id   string
	stop func()

	done     chan struct{}
	exit     sandbox.Exit
	killOnce sync.Once
	endOnce  sync.Once
}

// start sends a command to the node; the node streams its output back.
func (c *nodeConn) start(p ExecParams, o sandbox.Options) (proc, error) {
	id := "n-" + randomID()
	ch, stop, err := c.wait(id)
	if err != nil {
		return nil, err
	}
	np := &nodeProc{c: c, id: id, stop: stop, done: make(chan struct{})}
	cmd := &executorv1.NodeCommand{RequestId: id, OutputBudget: o.Budget, Exec: &executorv1.ExecRequest{
		Command: o.Command, Workdir: o.Workdir, Env: o.Env, Pty: o.Pty,
		TimeoutSeconds: int32(p.Timeout / time.Second),
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

func (p *nodeProc) follow(ch <-chan *executorv1.AttachNodeRequest, onOutput func(sandbox.Stream, []byte)) {
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
					x.Err = fmt.Errorf("node %s: the command failed", p.c.name)
				}
			}
			p.end(x)
			return
		}
	}
	p.end(sandbox.Exit{Code: -1, Err: fmt.Errorf("node %s disconnected while the command ran", p.c.name)})
}

func (p *nodeProc) end(x sandbox.Exit) {
	p.endOnce.Do(func() {
		p.exit = x
		p.stop()
		close(p.done)
	})
}

func (p *nodeProc) Done() <-chan struct{} { return p.done }
func (p *nodeProc) Exit() sandbox.Exit    { return p.exit }

// Kill asks the node to kill the command's tree; a node that does not
// confirm in time is taken as having failed.
func (p *nodeProc) Kill() error {
	p.killOnce.Do(func() {
		err := p.c.send(&executorv1.AttachNodeResponse{Message: &executorv1.AttachNodeResponse_Cancel{Cancel: p.id}})
		go func() {
			t := time.NewTimer(nodeKillGrace)
			defer t.Stop()
			select {
			case <-p.done:
			case <-t.C:
				p.end(sandbox.Exit{Code: -1, Err: fmt.Errorf("node %s did not confirm the kill (%v)", p.c.name, err)})
			}
		}()
	})
	return nil
}

func (p *nodeProc) Write([]byte, bool) error {
	return errors.New("standard input is not available for commands on a node")
}
