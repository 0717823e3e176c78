package placement

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	approvalv1 "github.com/conch-sh/conch/gen/go/conch/approval/v1"
	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
)

// executorService prefixes the executor's full method names.
var executorService = "/" + executorv1.ExecutorService_ServiceDesc.ServiceName + "/"

// Router pins executor calls to the executor holding their sandbox or node,
// and places new sandboxes on the executor with the most room. Install its
// interceptors on the connection to the executor service.
type Router struct {
	etcd      *clientv3.Client
	log       *slog.Logger
	load      load
	executors *discovery.Watched
	direct    direct
}

// NewRouter returns a Router reading records from etcd; it follows the
// executors' load until ctx ends. A call pinned to an executor that is
// draining goes over a connection dial opens to it (none when dial is nil).
func NewRouter(ctx context.Context, etcd *clientv3.Client, log *slog.Logger, dial Dialer) *Router {
	if log == nil {
		log = slog.Default()
	}
	executors, err := discovery.Watch(ctx, etcd, "executor", log)
	if err != nil {
		panic(err) // "executor" is a valid service name
	}
	r := &Router{etcd: etcd, log: log, executors: executors, direct: direct{dial: dial}}
	go r.load.watch(ctx, etcd, log)
	go r.direct.closeAll(ctx)
	return r
}

// target returns the key of the record that places an executor request,
// or "" for a request about no particular sandbox or node.
func target(ctx context.Context, req any) string {
	if r, ok := req.(*executorv1.ExecRequest); ok && r.GetHost() == approvalv1.Host_HOST_NODE {
		sc, _ := tenant.From(ctx)
		if sc.Account == "" || !validName(r.GetNode()) {
			return ""
		}
		return NodeKey(sc.Account, r.GetNode())
	}
	var id string
	switch r := req.(type) {
	case interface{ GetSandboxId() string }:
		id = r.GetSandboxId()
	case *executorv1.GetSandboxRequest:
		id = r.GetId()
	case *executorv1.DestroySandboxRequest:
		id = r.GetId()
	case *executorv1.TerminalRequest:
		id = r.GetStart().GetSandboxId()
	}
	if !validName(id) {
		return ""
	}
	return SandboxKey(id)
}

// validName reports whether s can be the last element of a record key.
func validName(s string) bool {
	return s != "" && len(s) <= 128 && !strings.ContainsAny(s, "/\x00")
}

// pin returns ctx pinned to the executor holding req's sandbox or node.
// Without a record (unknown, or another account's: the executor checks)
// the call is not pinned and whichever executor gets it answers NotFound.
func (r *Router) pin(ctx context.Context, req any) (context.Context, error) {
	key := target(ctx, req)
	if key == "" {
		return ctx, nil
	}
	// The load watch already knows most sandboxes; one it has not seen yet
	// (just created) is read from etcd.
	if id, ok := strings.CutPrefix(key, SandboxPrefix); ok {
		if addr, ok := r.load.addr(id); ok {
			return discovery.Pin(ctx, addr), nil
		}
	}
	rec, ok, err := Lookup(ctx, r.etcd, key)
	if err != nil {
		return ctx, status.Error(codes.Unavailable, err.Error())
	}
	if !ok || rec.Addr == "" {
		return ctx, nil
	}
	return discovery.Pin(ctx, rec.Addr), nil
}

// UnaryClientInterceptor pins unary executor calls, places CreateSandbox,
// and asks every executor for ListSandboxes.
func (r *Router) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !strings.HasPrefix(method, executorService) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		switch method {
		case executorv1.ExecutorService_ListSandboxes_FullMethodName:
			return r.listAll(ctx, method, req, reply, cc, invoker, opts)
		case executorv1.ExecutorService_CreateSandbox_FullMethodName:
			return r.create(ctx, method, req, reply, cc, invoker, opts)
		}
		ctx, err := r.pin(ctx, req)
		if err != nil {
			return err
		}
		err = invoker(ctx, method, req, reply, cc, opts...)
		dc := r.direct.fallback(ctx, err)
		if dc != nil {
			err = dc.Invoke(ctx, method, req, reply, opts...)
		}
		return unreachable(ctx, req, err, dc)
	}
}

// unreachable rewords the error of a call whose executor could not be
// reached, through discovery or over dc when it was tried, to name what
// the executor holds rather than its internal address.
func unreachable(ctx context.Context, req any, err error, dc *grpc.ClientConn) error {
	failed := discovery.Unreachable(err) ||
		dc != nil && status.Code(err) == codes.Unavailable && dc.GetState() == connectivity.TransientFailure
	if !failed {
		return err
	}
	key := target(ctx, req)
	what := "its executor"
	if id, ok := strings.CutPrefix(key, SandboxPrefix); ok {
		what = "the executor holding sandbox " + id
	} else if node, ok := strings.CutPrefix(key, NodePrefix); ok {
		_, name, _ := strings.Cut(node, "/")
		what = "the executor holding node " + name + "'s connection"
	}
	return status.Error(codes.Unavailable, what+" is not reachable; it may be restarting")
}

// listAll merges ListSandboxes from every executor. An executor that does
// not answer (it is going away) is left out rather than failing the list.
func (r *Router) listAll(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	addrs, err := discovery.Endpoints(ctx, r.etcd, "executor")
	if err != nil || len(addrs) == 0 {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	out, ok := reply.(*executorv1.ListSandboxesResponse)
	if !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		got   int
	)
	out.Sandboxes = nil
	// The caller's header, trailer and peer destinations would be written
	// by every call at once.
	opts = slices.DeleteFunc(slices.Clone(opts), func(o grpc.CallOption) bool {
		switch o.(type) {
		case grpc.HeaderCallOption, grpc.TrailerCallOption, grpc.PeerCallOption:
			return true
		}
		return false
	})
	for _, addr := range addrs {
		wg.Go(func() {
			one := &executorv1.ListSandboxesResponse{}
			err := invoker(discovery.Pin(ctx, addr), method, req, one, cc, opts...)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.log.WarnContext(ctx, "listing sandboxes of an executor failed", "executor", addr, "error", err)
				if first == nil {
					first = err
				}
				return
			}
			got++
			out.Sandboxes = append(out.Sandboxes, one.GetSandboxes()...)
		})
	}
	wg.Wait()
	if got == 0 {
		return first
	}
	// A paused sandbox is listed by every executor (and, resumed
	// meanwhile, by its new one too): one of each id, a live one first.
	paused := func(sb *executorv1.Sandbox) bool {
		return sb.GetState() == executorv1.SandboxState_SANDBOX_STATE_PAUSED
	}
	slices.SortFunc(out.Sandboxes, func(a, b *executorv1.Sandbox) int {
		if c := strings.Compare(a.GetId(), b.GetId()); c != 0 {
			return c
		}
		return cmp.Compare(b2i(paused(a)), b2i(paused(b)))
	})
	out.Sandboxes = slices.CompactFunc(out.Sandboxes, func(a, b *executorv1.Sandbox) bool { return a.GetId() == b.GetId() })
	if out.Sandboxes == nil {
		out.Sandboxes = []*executorv1.Sandbox{}
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// StreamClientInterceptor pins streaming executor calls (a client
// stream's first message names its sandbox, a terminal's too). The
// request is only known at the stream's first SendMsg, so the real stream
// is opened then. A node's stream is not pinned: the node goes where it
// is placed.
func (r *Router) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if !strings.HasPrefix(method, executorService) || method == executorv1.ExecutorService_AttachNode_FullMethodName {
			return streamer(ctx, desc, cc, method, opts...)
		}
		return &pinnedStream{r: r, ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer, opts: opts}, nil
	}
}

// pinnedStream opens its stream when the request is sent.
type pinnedStream struct {
	r        *Router
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption

	cs grpc.ClientStream // nil until SendMsg
}

func (s *pinnedStream) SendMsg(m any) error {
	if s.cs == nil {
		ctx, err := s.r.pin(s.ctx, m)
		if err != nil {
			return err
		}
		cs, err := s.streamer(ctx, s.desc, s.cc, s.method, s.opts...)
		dc := s.r.direct.fallback(ctx, err)
		if dc != nil {
			cs, err = dc.NewStream(ctx, s.desc, s.method, s.opts...)
		}
		if err != nil {
			return unreachable(ctx, m, err, dc)
		}
		s.cs = cs
	}
	return s.cs.SendMsg(m)
}

func (s *pinnedStream) RecvMsg(m any) error {
	if s.cs == nil {
		return errNotSent
	}
	return s.cs.RecvMsg(m)
}

func (s *pinnedStream) Header() (metadata.MD, error) {
	if s.cs == nil {
		return nil, errNotSent
	}
	return s.cs.Header()
}

func (s *pinnedStream) Trailer() metadata.MD {
	if s.cs == nil {
		return nil
	}
	return s.cs.Trailer()
}

func (s *pinnedStream) CloseSend() error {
	if s.cs == nil {
		return errNotSent
	}
	return s.cs.CloseSend()
}

func (s *pinnedStream) Context() context.Context {
	if s.cs == nil {
		return s.ctx
	}
	return s.cs.Context()
}
