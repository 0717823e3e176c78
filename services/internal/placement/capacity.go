package placement

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
)

// MetaMaxSandboxes is the key, in an executor's discovery registration, of
// how many sandboxes it holds at most.
const MetaMaxSandboxes = "max_sandboxes"

// createTries is how many executors a CreateSandbox tries, best first,
// when one turns out to be full (its count here lagged).
const createTries = 3

// reasonFull marks an executor's refusal of a sandbox it has no room for.
const reasonFull = "EXECUTOR_FULL"

// reasonAtCapacity marks the router's refusal when no executor has room;
// clients see it as the code at_capacity.
const reasonAtCapacity = "AT_CAPACITY"

// Full is an executor's answer to a sandbox beyond the most it holds:
// ResourceExhausted, marked so that the router tells it from a quota's,
// tries the next executor and, when none has room, answers for all of
// them (atCapacity) without naming any.
func Full(name string, max int) error {
	return errs.WithReason(codes.ResourceExhausted, reasonFull, fmt.Sprintf("executor %s is full (%d sandboxes); retry in a few seconds", name, max), nil)
}

// Busy is an executor's answer to a sandbox it has no room to make now:
// none of its work slots came free within wait. The router takes it as
// Full: it tries the next executor and, when none has room, answers for
// all of them.
func Busy(name string, wait time.Duration) error {
	return errs.WithReason(codes.ResourceExhausted, reasonFull, fmt.Sprintf("executor %s is busy: no work slot came free in %v; retry in a few seconds", name, wait), nil)
}

// isFull reports whether err is an executor's Full.
func isFull(err error) bool { return errs.HasReason(err, codes.ResourceExhausted, reasonFull) }

// atCapacity is the router's answer when no executor has room for a
// sandbox; n is how many executors there are, 0 when unknown.
func atCapacity(n int) error {
	which := fmt.Sprintf("all %d executors are", n)
	switch n {
	case 0:
		which = "the executors are"
	case 1:
		which = "the one executor is"
	}
	return errs.WithReason(codes.ResourceExhausted, reasonAtCapacity, which+" at capacity; retry in a few seconds", nil)
}

// load counts each executor's sandboxes from the placement records, kept
// current by a watch.
type load struct {
	mu    sync.Mutex
	ready bool
	byID  map[string]string // sandbox id → executor address
	count map[string]int    // executor address → sandboxes
}

func (l *load) reset(kvs map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byID, l.count, l.ready = kvs, map[string]int{}, true
	for _, addr := range kvs {
		l.count[addr]++
	}
}

func (l *load) put(id, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.byID[id]; ok {
		l.count[old]--
	}
	l.byID[id] = addr
	l.count[addr]++
}

func (l *load) remove(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.byID[id]; ok {
		l.count[old]--
		delete(l.byID, id)
	}
}

// addr returns the executor holding sandbox id, as the watch last saw it.
func (l *load) addr(id string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.byID[id]
	return a, ok && a != ""
}

func (l *load) snapshot() (map[string]int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ready {
		return nil, false
	}
	return maps.Clone(l.count), true
}

func addrOf(v []byte) string {
	var r Record
	_ = json.Unmarshal(v, &r)
	return r.Addr
}

// watch keeps l until ctx ends, listing again after a lost watch. While it
// lists again, l keeps its last counts: they are a hint, and a little
// stale beats none.
func (l *load) watch(ctx context.Context, cli *clientv3.Client, log *slog.Logger) {
	etcdx.ListWatch(ctx, cli, SandboxPrefix, etcdx.Handler{
		Reset: func(kvs []*mvccpb.KeyValue, _ int64) error {
			byID := make(map[string]string, len(kvs))
			for _, kv := range kvs {
				byID[strings.TrimPrefix(string(kv.Key), SandboxPrefix)] = addrOf(kv.Value)
			}
			l.reset(byID)
			return nil
		},
		Events: func(evs []*clientv3.Event) error {
			for _, ev := range evs {
				id := strings.TrimPrefix(string(ev.Kv.Key), SandboxPrefix)
				if ev.Type == clientv3.EventTypeDelete {
					l.remove(id)
				} else {
					l.put(id, addrOf(ev.Kv.Value))
				}
			}
			return nil
		},
	}, etcdx.WithLogger(log))
}

// candidates returns the executors with room for a sandbox, most room
// first (ties in random order), and how many executors there are; or a
// ResourceExhausted error when every executor is full. No candidates and
// no error means no basis to choose: balance as usual.
func (r *Router) candidates() (addrs []string, executors int, err error) {
	count, ok := r.load.snapshot()
	if !ok {
		return nil, 0, nil
	}
	ins, ok := r.executors.Instances()
	if !ok || len(ins) == 0 {
		return nil, 0, nil
	}
	type cand struct {
		addr string
		free int
	}
	cs := make([]cand, 0, len(ins))
	for _, in := range ins {
		max, err := strconv.Atoi(in.Metadata[MetaMaxSandboxes])
		if err != nil {
			max = 1 << 30 // an executor that does not say is taken as roomy
		}
		cs = append(cs, cand{in.Addr, max - count[in.Addr]})
	}
	rand.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
	slices.SortStableFunc(cs, func(a, b cand) int { return b.free - a.free })
	for _, c := range cs {
		if c.free > 0 && len(addrs) < createTries {
			addrs = append(addrs, c.addr)
		}
	}
	if len(addrs) == 0 {
		return nil, len(cs), atCapacity(len(cs))
	}
	return addrs, len(cs), nil
}

// create places a CreateSandbox on the executor with the most room,
// moving on to the next when one is full after all (the counts here lag
// the executors' own) or going away. When none made it, the answer is that
// one went away or, when all were full, the cluster's, which names none.
func (r *Router) create(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	addrs, executors, err := r.candidates()
	if err != nil {
		return err
	}
	if len(addrs) == 0 {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if isFull(err) {
			return atCapacity(0)
		}
		return err
	}
	var gone error
	for _, addr := range addrs {
		err = invoker(discovery.Pin(ctx, addr), method, req, reply, cc, opts...)
		switch {
		case isFull(err):
			continue
		case status.Code(err) == codes.Unavailable:
			gone = err // going away: try the next
			continue
		}
		return err
	}
	if gone != nil {
		return gone
	}
	return atCapacity(executors)
}
