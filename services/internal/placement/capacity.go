package placement

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
)

// MetaMaxSandboxes is the key, in an executor's discovery registration, of
// how many sandboxes it holds at most.
const MetaMaxSandboxes = "max_sandboxes"

// createTries is how many executors a CreateSandbox tries, best first,
// when one turns out to be full (its count here lagged).
const createTries = 3

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
// first (ties in random order), or a ResourceExhausted error when every
// executor is full. nil, nil means no basis to choose: balance as usual.
func (r *Router) candidates(ctx context.Context) ([]string, error) {
	count, ok := r.load.snapshot()
	if !ok {
		return nil, nil
	}
	ins, err := discovery.Instances(ctx, r.etcd, "executor")
	if err != nil || len(ins) == 0 {
		return nil, nil
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
	var out []string
	for _, c := range cs {
		if c.free > 0 && len(out) < createTries {
			out = append(out, c.addr)
		}
	}
	if len(out) == 0 {
		// A status, as the executor's own answer would be: callers see the
		// interceptor's error as the call's.
		return nil, status.Errorf(codes.ResourceExhausted, "all %d executors are at capacity; retry in a few seconds", len(cs))
	}
	return out, nil
}

// create places a CreateSandbox on the executor with the most room,
// moving on to the next when one is full after all.
func (r *Router) create(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	addrs, err := r.candidates(ctx)
	if err != nil {
		return err
	}
	if len(addrs) == 0 {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	for _, addr := range addrs {
		err = invoker(discovery.Pin(ctx, addr), method, req, reply, cc, opts...)
		switch status.Code(err) {
		case codes.ResourceExhausted, codes.Unavailable:
			continue // full, or going away: try the next
		}
		return err
	}
	return err
}
