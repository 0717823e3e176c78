package grpcserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

const testService = "conch.test.Test"

// fixture is a tiny hand-written service: unary methods that succeed,
// fail or panic, and server streams that block until released.
type fixture struct {
	streamStarted chan struct{}
	release       chan struct{}
}

func (f *fixture) desc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: testService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			unary("Echo", func() error { return nil }),
			unary("Panic", func() error { panic("boom") }),
			unary("NotFound", func() error { return errs.New(errs.NotFound, "no such thing") }),
			unary("Broken", func() error { return errors.New("secret detail") }),
		},
		Streams: []grpc.StreamDesc{
			{StreamName: "Hold", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				f.streamStarted <- struct{}{}
				select {
				case <-f.release:
					return nil
				case <-ss.Context().Done():
					return ss.Context().Err()
				}
			}},
			{StreamName: "PanicStream", ServerStreams: true, Handler: func(any, grpc.ServerStream) error {
				panic("stream boom")
			}},
		},
	}
}

func unary(name string, fn func() error) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) {
				if err := fn(); err != nil {
					return nil, err
				}
				return new(emptypb.Empty), nil
			}
			if interceptor == nil {
				return h(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + testService + "/" + name}, h)
		},
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type harness struct {
	addr   string
	srv    *Server
	fix    *fixture
	conn   *grpc.ClientConn
	logs   *syncBuffer
	served chan error
}

func start(t *testing.T, opts Options) *harness {
	t.Helper()
	h := &harness{
		fix:    &fixture{streamStarted: make(chan struct{}, 1), release: make(chan struct{})},
		logs:   &syncBuffer{},
		served: make(chan error, 1),
	}
	opts.Name = "test"
	opts.Logger = slog.New(slog.NewTextHandler(h.logs, nil))
	h.srv = New(opts)
	h.srv.GRPC().RegisterService(h.fix.desc(), nil)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	h.addr = lis.Addr().String()
	go func() { h.served <- h.srv.Serve(lis) }()
	t.Cleanup(func() {
		h.srv.Shutdown(context.WithoutCancel(t.Context()))
		if err := <-h.served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	h.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { h.conn.Close() })
	return h
}

func (h *harness) health(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	resp, err := healthpb.NewHealthClient(h.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return resp.GetStatus(), err
}

func (h *harness) call(ctx context.Context, method string) error {
	return h.conn.Invoke(ctx, "/"+testService+"/"+method, new(emptypb.Empty), new(emptypb.Empty))
}

func TestHealthDuringShutdown(t *testing.T) {
	h := start(t, Options{DrainDelay: time.Minute})

	for _, service := range []string{"", testService} {
		got, err := h.health(t.Context(), service)
		if err != nil || got != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health(%q) = %v, %v; want SERVING", service, got, err)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	shutdownDone := make(chan struct{})
	go func() {
		h.srv.Shutdown(ctx)
		close(shutdownDone)
	}()

	eventually(t, 5*time.Second, func() error {
		got, err := h.health(t.Context(), "")
		if err == nil && got != healthpb.HealthCheckResponse_NOT_SERVING {
			err = fmt.Errorf("health = %v, want NOT_SERVING while draining", got)
		}
		return err
	})
	if got, _ := h.health(t.Context(), testService); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health(%q) = %v while draining, want NOT_SERVING", testService, got)
	}
	if err := h.call(t.Context(), "Echo"); err != nil {
		t.Errorf("Echo while draining: %v", err)
	}

	cancel()
	select {
	case <-shutdownDone:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after its context was cancelled")
	}
}

func TestErrorsAndPanics(t *testing.T) {
	h := start(t, Options{})
	tests := []struct {
		method   string
		stream   bool
		wantCode codes.Code
		wantMsg  string
		wantLog  string
	}{
		{method: "Echo", wantCode: codes.OK},
		{method: "NotFound", wantCode: codes.NotFound, wantMsg: "no such thing"},
		{method: "Broken", wantCode: codes.Internal, wantMsg: "internal error", wantLog: "secret detail"},
		{method: "Panic", wantCode: codes.Internal, wantMsg: "internal error", wantLog: "grpc handler panicked"},
		{method: "PanicStream", stream: true, wantCode: codes.Internal, wantMsg: "internal error", wantLog: "stream boom"},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			var err error
			if tt.stream {
				err = h.recvAll(t.Context(), tt.method)
			} else {
				err = h.call(t.Context(), tt.method)
			}
			s := status.Convert(err)
			if s.Code() != tt.wantCode || s.Message() != tt.wantMsg {
				t.Errorf("%s = (%v, %q), want (%v, %q)", tt.method, s.Code(), s.Message(), tt.wantCode, tt.wantMsg)
			}
			if tt.wantLog != "" && !strings.Contains(h.logs.String(), tt.wantLog) {
				t.Errorf("logs lack %q:\n%s", tt.wantLog, h.logs.String())
			}
		})
	}
	if !strings.Contains(h.logs.String(), "runtime/debug.Stack") {
		t.Errorf("panic log has no stack:\n%s", h.logs.String())
	}
	if err := h.call(t.Context(), "Echo"); err != nil {
		t.Errorf("server did not survive the panics: %v", err)
	}
}

func (h *harness) recvAll(ctx context.Context, method string) error {
	st, err := h.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/"+testService+"/"+method)
	if err != nil {
		return err
	}
	if err := st.SendMsg(new(emptypb.Empty)); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		if err := st.RecvMsg(new(emptypb.Empty)); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func TestShutdownWithInFlightStream(t *testing.T) {
	tests := []struct {
		name        string
		release     bool
		wantCode    codes.Code
		stopTimeout time.Duration
	}{
		{name: "stream finishes gracefully", release: true, wantCode: codes.OK, stopTimeout: 10 * time.Second},
		{name: "stream cut off at StopTimeout", release: false, wantCode: codes.Unavailable, stopTimeout: 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stopTimeout := tt.stopTimeout
			h := start(t, Options{StopTimeout: stopTimeout})
			streamErr := make(chan error, 1)
			go func() { streamErr <- h.recvAll(t.Context(), "Hold") }()
			select {
			case <-h.fix.streamStarted:
			case <-time.After(5 * time.Second):
				t.Fatal("stream handler did not start")
			}
			began := time.Now()
			shutdownDone := make(chan struct{})
			go func() {
				h.srv.Shutdown(t.Context())
				close(shutdownDone)
			}()
			if tt.release {
				// Release the stream once the graceful stop has begun,
				// which closes the listener.
				eventually(t, 5*time.Second, func() error {
					c, err := net.Dial("tcp", h.addr)
					if err != nil {
						return nil
					}
					c.Close()
					return errors.New("listener still open")
				})
				close(h.fix.release)
			}
			select {
			case <-shutdownDone:
			case <-time.After(stopTimeout + 5*time.Second):
				t.Fatalf("Shutdown did not return within StopTimeout %v", stopTimeout)
			}
			if took := time.Since(began); tt.release && took >= stopTimeout {
				t.Errorf("graceful Shutdown took %v, want less than StopTimeout %v", took, stopTimeout)
			}
			select {
			case err := <-h.served:
				h.served <- err // for the cleanup
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Serve did not return after Shutdown")
			}
			if got := status.Code(<-streamErr); got != tt.wantCode {
				t.Errorf("stream ended with %v, want %v", got, tt.wantCode)
			}
		})
	}
}

// eventually polls cond every 10ms until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
	}
}
