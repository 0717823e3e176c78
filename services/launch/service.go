package launch

import (
	"context"
	"fmt"
	"net"
	"sync"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/conch-sh/conch/services/internal/platform/serving"
)

// Every service starts the same way, alone (`conch router|executor|
// approval|workspace`, runService) or beside the others (`conch dev`):
//
//  1. build: a builder makes the service from its configuration, reached
//     at the address of its gRPC listener, which is open by then;
//  2. register: its gRPC handlers (and the router's HTTP server) are what
//     the component holds;
//  3. run: start serves them, registers the service in discovery and runs
//     its background work;
//  4. close: on shutdown the service leaves discovery and drains, then its
//     background work stops, then what the build opened is closed in
//     reverse order, then the process's etcd client and telemetry.

// A component is one service built and ready to run.
type component struct {
	// name is the service's name in discovery.
	name string
	// lis is the service's gRPC listener; addr is where the other
	// services reach it.
	lis  net.Listener
	addr string

	// register adds the service's gRPC handlers to the server.
	register func(*grpc.Server)
	// meta is registered in discovery beside addr.
	meta map[string]string
	// http, when not nil, serves the service's HTTP API until ctx ends,
	// then drains as the gRPC server does (the router's public API).
	http func(ctx context.Context, c *Common) error
	// run, when not nil, is the service's background work. It outlives
	// the servers' drain, so that a call still accepted while draining
	// never meets a half-shut service.
	run func(context.Context) error
	// drain, when not nil, is called as soon as the shutdown begins.
	drain func()
	// closers free what the build opened, in reverse order.
	closers []func()
}

// onClose adds f to what closing c frees; f runs before what was added
// earlier.
func (c *component) onClose(f func()) { c.closers = append(c.closers, f) }

// close frees what the build opened, last opened first.
func (c *component) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
}

// A builder makes a service from its configuration into c: c.name and
// c.addr are set, and c.lis is open. What it opens it hands to c.onClose,
// even when it fails: c is closed then.
type builder func(ctx context.Context, p *process, c *component) error

// build opens name's gRPC listener on grpcAddr, advertised as advertise
// (empty: the listen address), and builds the service there.
func (p *process) build(ctx context.Context, name, grpcAddr, advertise string, b builder) (*component, error) {
	lis, addr, err := listen(name, grpcAddr, advertise)
	if err != nil {
		return nil, err
	}
	c := &component{name: name, lis: lis, addr: addr}
	if err := b(ctx, p, c); err != nil {
		c.close()
		_ = lis.Close()
		return nil, err
	}
	return c, nil
}

// start runs c in g until ctx ends: its gRPC server, registered in
// discovery, its HTTP server, if any, and its background work, which
// stops once the servers have drained.
func (p *process) start(ctx context.Context, g *errgroup.Group, c *component, common *Common) {
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var servers sync.WaitGroup
	serve := func(f func() error) {
		servers.Add(1)
		g.Go(func() error {
			defer servers.Done()
			return f()
		})
	}
	serve(func() error { return p.serveOn(ctx, c.name, c.lis, c.addr, c.meta, common, c.register) })
	if c.http != nil {
		serve(func() error { return c.http(ctx, common) })
	}
	g.Go(func() error {
		servers.Wait()
		stopBG()
		return nil
	})
	if c.run != nil {
		g.Go(func() error { return c.run(bg) })
	}
	if c.drain != nil {
		g.Go(func() error {
			<-ctx.Done()
			c.drain()
			return nil
		})
	}
}

// runService runs the single-service command of the service b builds,
// named name, with the settings in common, until ctx ends or the service
// fails.
func runService(ctx context.Context, name string, common *Common, b builder) error {
	p, err := newProcess(ctx, "conch-"+name, common)
	if err != nil {
		return err
	}
	defer p.close(ctx)
	c, err := p.build(ctx, name, common.GRPCAddr, common.AdvertiseAddr, b)
	if err != nil {
		return err
	}
	defer c.close()
	g, gctx := errgroup.WithContext(ctx)
	p.start(gctx, g, c, common)
	// A service with an HTTP API serves /metrics there.
	if c.http == nil && common.MetricsAddr != "" {
		g.Go(func() error { return p.serveMetrics(gctx, common.MetricsAddr, common.ShutdownTimeout) })
	}
	return g.Wait()
}

// listen opens a service's gRPC listener before the service is built, so
// that the service knows the address it will be reached at.
func listen(name, addr, advertise string) (net.Listener, string, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s: listen: %w", name, err)
	}
	advertised, err := serving.Advertised(lis, advertise)
	if err != nil {
		_ = lis.Close()
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	return lis, advertised, nil
}

// serveOn runs one service's gRPC server on lis until ctx ends, registered
// in discovery at advertise with meta; it leaves discovery and reports
// NOT_SERVING for c.DrainDelay before it stops.
func (p *process) serveOn(ctx context.Context, name string, lis net.Listener, advertise string, meta map[string]string, c *Common, register func(*grpc.Server)) error {
	return serving.Run(ctx, serving.Options{
		Metadata:       meta,
		Name:           name,
		Listener:       lis,
		AdvertiseAddr:  advertise,
		Etcd:           p.etcd,
		Signer:         p.signer,
		Register:       register,
		Logger:         p.log,
		DrainDelay:     c.DrainDelay,
		StopTimeout:    c.ShutdownTimeout,
		TracerProvider: p.tel.TracerProvider(),
		MeterProvider:  p.tel.MeterProvider(),
	})
}
