package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// pool keeps sandboxes built ahead of demand. A pooled sandbox has never run
// anything; claiming one sets its limits and identity.
type pool struct {
	rt     *Runtime
	size   int
	mu     sync.Mutex
	ready  []*Sandbox
	wake   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func newPool(rt *Runtime, size int) *pool {
	ctx, cancel := context.WithCancel(context.Background()) // lives as long as the runtime
	p := &pool{rt: rt, size: size, wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	if size <= 0 {
		close(p.done)
		return p
	}
	go p.fill()
	p.poke()
	return p
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns a ready sandbox, or nil.
func (p *pool) take() *Sandbox {
	if p.size <= 0 {
		return nil
	}
	defer p.poke()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.ready) > 0 {
		s := p.ready[0]
		p.ready = p.ready[1:]
		select {
		case <-s.done: // its agent died while waiting
			go func() { _ = s.Destroy(context.Background()) }()
		default:
			return s
		}
	}
	return nil
}

func (p *pool) fill() {
	defer close(p.done)
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			n := len(p.ready)
			p.mu.Unlock()
			name := "w" + hostName()
			if n >= p.size || p.ctx.Err() != nil {
				break
			}
			spec := Spec{ID: name}
			spec.withDefaults()
			s, err := p.rt.build(p.ctx, spec, name)
			if err != nil {
				if p.ctx.Err() != nil {
					return
				}
				p.rt.log.Warn("building a pooled sandbox failed", "error", err)
				select {
				case <-p.ctx.Done():
					return
				case <-time.After(time.Second): // do not spin on a broken host
				}
				continue
			}
			p.mu.Lock()
			p.ready = append(p.ready, s)
			p.mu.Unlock()
		}
	}
}

func (p *pool) close() {
	p.cancel()
	<-p.done
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, s := range ready {
		_ = s.Destroy(context.Background())
	}
}

// fit gives a pooled sandbox its identity and limits.
func (s *Sandbox) fit(spec Spec) error {
	if err := s.cg.setLimits(spec.Limits); err != nil {
		return err
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d", spec.Limits.WorkspaceBytes, spec.Limits.WorkspaceFiles)
	if err := unix.Mount("tmpfs", s.workspace, "tmpfs", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("sandbox: resize workspace: %w", err)
	}
	s.mu.Lock()
	s.spec = spec
	s.mu.Unlock()
	return nil
}
