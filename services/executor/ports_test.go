package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

// echoServer runs, in sandbox id, a server on port 8123 that answers each
// line with "echo " and the line, connection after connection.
const echoServer = `exec python3 -c '
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 8123)); s.listen(8)
def serve(c):
    f = c.makefile("rwb")
    for l in f:
        f.write(b"echo " + l); f.flush()
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
'`

func TestPorts(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	id := createSandbox(t, x, "acme")
	bg, err := x.client.Exec(ctx, &executorv1.ExecRequest{SandboxId: id, Command: echoServer, Background: true})
	if err == nil {
		_, err = bg.Recv()
	}
	if err != nil {
		t.Fatal(err)
	}
	connect := func(ctx context.Context, port int32, public bool) (executorv1.ExecutorService_ConnectPortClient, error) {
		s, err := x.client.ConnectPort(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.Send(&executorv1.ConnectPortRequest{SandboxId: id, Port: port, Public: public}); err != nil {
			return nil, err
		}
		if _, err := s.Recv(); err != nil {
			return nil, err
		}
		return s, nil
	}
	// Not exposed: nothing reaches it.
	_, err = connect(ctx, 8123, false)
	wantCode(t, err, codes.NotFound, "not exposed")

	p, err := x.client.ExposePort(ctx, &executorv1.ExposePortRequest{SandboxId: id, Port: 8123})
	if err != nil || p.GetPort().GetPort() != 8123 || p.GetPort().GetPublic() || p.GetPort().GetExpiresAt() != nil {
		t.Fatalf("expose = %v, %v", p, err)
	}
	var s executorv1.ExecutorService_ConnectPortClient
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s, err = connect(ctx, 8123, false); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&executorv1.ConnectPortRequest{Data: []byte("hi\n")}); err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if err != nil || string(m.GetData()) != "echo hi\n" {
		t.Fatalf("read %q, %v", m.GetData(), err)
	}
	// A private port is not reached by a public URL.
	_, err = connect(ctx, 8123, true)
	wantCode(t, err, codes.NotFound, "not exposed")
	// Another account's key reaches nothing.
	_, err = connect(as(t, "mallory"), 8123, false)
	wantCode(t, err, codes.NotFound, "not found")

	pub, err := x.client.ExposePort(ctx, &executorv1.ExposePortRequest{SandboxId: id, Port: 9000, Public: true})
	if err != nil || !pub.GetPort().GetPublic() || time.Until(pub.GetPort().GetExpiresAt().AsTime()) < 59*time.Minute {
		t.Fatalf("a public port = %v, %v; want an hour by default", pub, err)
	}
	list, err := x.client.ListPorts(ctx, &executorv1.ListPortsRequest{SandboxId: id})
	if err != nil || len(list.GetPorts()) != 2 || list.GetPorts()[0].GetPort() != 8123 {
		t.Fatalf("list = %v, %v", list, err)
	}
	// Nothing listens on 9000: the connection is refused, not hung.
	_, err = connect(ctx, 9000, true)
	wantCode(t, err, codes.Unavailable, "nothing answers")

	// Closing the port ends its connections.
	if _, err := x.client.ClosePort(ctx, &executorv1.ClosePortRequest{SandboxId: id, Port: 8123}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a closed port's connection lives on")
	}
	_, err = connect(ctx, 8123, false)
	wantCode(t, err, codes.NotFound, "not exposed")
	_, err = x.client.ClosePort(ctx, &executorv1.ClosePortRequest{SandboxId: id, Port: 8123})
	wantCode(t, err, codes.NotFound, "not exposed")

	for _, tc := range []struct {
		name string
		req  *executorv1.ExposePortRequest
		msg  string
	}{
		{"port 0", &executorv1.ExposePortRequest{SandboxId: id, Port: 0}, "port: must be 1-65535"},
		{"port 65536", &executorv1.ExposePortRequest{SandboxId: id, Port: 65536}, "port: must be 1-65535"},
		{"over a day", &executorv1.ExposePortRequest{SandboxId: id, Port: 80, ExpiresInSeconds: 86401}, "expires_in_seconds"},
	} {
		_, err := x.client.ExposePort(ctx, tc.req)
		wantCode(t, err, codes.InvalidArgument, tc.msg)
	}
	for i := range MaxPorts - 1 {
		if _, err := x.client.ExposePort(ctx, &executorv1.ExposePortRequest{SandboxId: id, Port: int32(10000 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = x.client.ExposePort(ctx, &executorv1.ExposePortRequest{SandboxId: id, Port: 20000})
	wantCode(t, err, codes.ResourceExhausted, "at most 16 ports")
	if !strings.Contains(echoServer, "8123") {
		t.Fatal("the echo server moved")
	}
}
