package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// spares keeps up to size values made ahead of demand by a goroutine of
// its own: the warm sandboxes of the pool, and the launches (bubblewraps
// parked in their cgroups) that cold creates start from.
type spares[T any] struct {
	what    string // for the log
	size    int
	make    func(ctx context.Context) (T, error)
	dead    func(T) bool // one that died while waiting
	discard func(T)
	// quiet, when set, holds the making of one back while another is
	// ready and the runtime is busy.
	quiet *quiet
	log   *slog.Logger

	mu     sync.Mutex
	ready  []T
	wake   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func newSpares[T any](sp *spares[T]) *spares[T] {
	sp.ctx, sp.cancel = context.WithCancel(context.Background()) // lives as long as the runtime
	sp.wake, sp.done = make(chan struct{}, 1), make(chan struct{})
	if sp.size <= 0 {
		close(sp.done)
		return sp
	}
	go sp.fill()
	sp.poke()
	return sp
}

func (sp *spares[T]) poke() {
	select {
	case sp.wake <- struct{}{}:
	default:
	}
}

// take returns a ready value; ok is false when there is none.
func (sp *spares[T]) take() (v T, ok bool) {
	if sp.size <= 0 {
		return v, false
	}
	defer sp.poke()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for len(sp.ready) > 0 {
		v = sp.ready[0]
		sp.ready = sp.ready[1:]
		if !sp.dead(v) {
			return v, true
		}
		go sp.discard(v)
	}
	return v, false
}

func (sp *spares[T]) fill() {
	defer close(sp.done)
	for {
		select {
		case <-sp.ctx.Done():
			return
		case <-sp.wake:
		}
		since := time.Now()
		for {
			n := sp.count()
			if n >= sp.size || sp.ctx.Err() != nil {
				break
			}
			if n > 0 && sp.quiet != nil {
				// Another is ready for the next caller: this one can wait
				// until the runtime is quiet, or until that one is taken.
				if d := sp.quiet.delay(time.Now(), since); d > 0 {
					t := time.NewTimer(d)
					select {
					case <-sp.ctx.Done():
						t.Stop()
						return
					case <-sp.wake:
						t.Stop()
					case <-t.C:
					}
					continue
				}
			}
			v, err := sp.make(sp.ctx)
			if err != nil {
				if sp.ctx.Err() != nil {
					return
				}
				sp.log.Warn("making a spare "+sp.what+" failed", "error", err)
				select {
				case <-sp.ctx.Done():
					return
				case <-time.After(time.Second): // do not spin on a broken host
				}
				continue
			}
			sp.mu.Lock()
			sp.ready = append(sp.ready, v)
			sp.mu.Unlock()
			since = time.Now()
		}
	}
}

// count is how many are ready.
func (sp *spares[T]) count() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.ready)
}

func (sp *spares[T]) close() {
	sp.cancel()
	<-sp.done
	sp.mu.Lock()
	ready := sp.ready
	sp.ready = nil
	sp.mu.Unlock()
	for _, v := range ready {
		sp.discard(v)
	}
}

// newPool keeps size sandboxes built and waiting. A pooled sandbox has
// never run anything; claiming one sets its limits and identity.
func newPool(rt *Runtime, size int) *spares[*Sandbox] {
	return newSpares(&spares[*Sandbox]{
		what: "sandbox", size: size, quiet: &rt.quiet, log: rt.log,
		make: func(ctx context.Context) (*Sandbox, error) {
			spec := Spec{ID: "w" + hostName()}
			spec.withDefaults()
			return rt.build(ctx, spec)
		},
		dead:    func(s *Sandbox) bool { return closed(s.done) }, // its agent died while waiting
		discard: func(s *Sandbox) { _ = s.Destroy(context.Background()) },
	})
}

// fit gives a pooled sandbox its identity and limits.
func (s *Sandbox) fit(spec Spec) error {
	if err := s.cg.setLimits(spec.Limits); err != nil {
		return err
	}
	if s.vol != "" {
		if err := limitVolume(s.workspace, spec.Limits.WorkspaceBytes); err != nil {
			return err
		}
	} else {
		opts := fmt.Sprintf("size=%d,nr_inodes=%d", spec.Limits.WorkspaceBytes, spec.Limits.WorkspaceFiles)
		if err := unix.Mount("tmpfs", s.workspace, "tmpfs", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("sandbox: resize workspace: %w", err)
		}
	}
	s.mu.Lock()
	s.spec = spec
	s.mu.Unlock()
	return nil
}
