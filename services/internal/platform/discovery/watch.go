package discovery

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
)

// Watched is the instances of one service as a watch keeps them, for a
// caller that needs them on a hot path (the router placing every new
// sandbox), where reading them from etcd would cost a round trip each
// time.
type Watched struct {
	mu    sync.Mutex
	byKey map[string]Instance
	ready bool
}

// Watch follows the instances registered for service until ctx ends.
// While a lost watch is listed again, the last instances stand: they
// lag etcd by a moment, as any list read a moment ago does.
func Watch(ctx context.Context, cli *clientv3.Client, service string, log *slog.Logger) (*Watched, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	w := &Watched{}
	go etcdx.ListWatch(ctx, cli, Target(service)+"/", etcdx.Handler{
		Reset: func(kvs []*mvccpb.KeyValue, _ int64) error {
			byKey := make(map[string]Instance, len(kvs))
			for _, kv := range kvs {
				if in, ok := instanceOf(kv.Value); ok {
					byKey[string(kv.Key)] = in
				}
			}
			w.mu.Lock()
			w.byKey, w.ready = byKey, true
			w.mu.Unlock()
			return nil
		},
		Events: func(evs []*clientv3.Event) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, ev := range evs {
				key := string(ev.Kv.Key)
				in, ok := instanceOf(ev.Kv.Value)
				if ev.Type == clientv3.EventTypeDelete || !ok {
					delete(w.byKey, key)
					continue
				}
				w.byKey[key] = in
			}
			return nil
		},
	}, etcdx.WithLogger(log))
	return w, nil
}

// Instances returns the instances sorted by address; ok is false until
// the watch has listed them once.
func (w *Watched) Instances() (ins []Instance, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ready {
		return nil, false
	}
	ins = make([]Instance, 0, len(w.byKey))
	for _, in := range w.byKey {
		ins = append(ins, in)
	}
	sortInstances(ins)
	return ins, true
}

// instanceOf reads a registration as etcd's endpoints manager writes it,
// keeping the string values of its metadata; false for one it cannot
// read, which the manager's own list skips too.
func instanceOf(v []byte) (Instance, bool) {
	var reg struct {
		Addr     string
		Metadata any
	}
	if err := json.Unmarshal(v, &reg); err != nil {
		return Instance{}, false
	}
	in := Instance{Addr: reg.Addr, Metadata: map[string]string{}}
	if m, ok := reg.Metadata.(map[string]any); ok {
		for k, v := range m {
			if s, ok := v.(string); ok {
				in.Metadata[k] = s
			}
		}
	}
	return in, true
}

func sortInstances(ins []Instance) {
	slices.SortFunc(ins, func(a, b Instance) int { return strings.Compare(a.Addr, b.Addr) })
}
