package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

func TestWatchFiles(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	id := createSandbox(t, x, "acme")
	run := func(cmd string) {
		t.Helper()
		if resp, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: cmd}); err != nil || resp.GetOutcome().GetExitCode() != 0 {
			t.Fatalf("%s: %v %v", cmd, resp, err)
		}
	}
	run("mkdir -p /home/workspace/src")
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stream, err := x.client.WatchFiles(wctx, &executorv1.WatchFilesRequest{SandboxId: id, Recursive: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetOp() != "ready" || first.GetPath() != "/home/workspace" {
		t.Fatalf("first event %v %v, want ready", first, err)
	}
	run("echo a > src/a.txt && mv src/a.txt src/b.txt && rm src/b.txt && mkdir new && touch new/inside")
	want := []string{"create /home/workspace/src/a.txt", "write /home/workspace/src/a.txt", "rename /home/workspace/src/b.txt", "remove /home/workspace/src/b.txt", "create /home/workspace/new", "create /home/workspace/new/inside"}
	var got []string
	for len(want) > 0 {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv: %v; got %q, still want %q", err, got, want)
		}
		s := ev.GetOp() + " " + ev.GetPath()
		got = append(got, s)
		if s == want[0] {
			want = want[1:]
		}
	}
	cancel()

	for _, tc := range []struct {
		name string
		ctx  context.Context
		req  *executorv1.WatchFilesRequest
		code codes.Code
		msg  string
	}{
		{"relative", ctx, &executorv1.WatchFilesRequest{SandboxId: id, Path: "src"}, codes.InvalidArgument, "clean absolute directory"},
		{"not clean", ctx, &executorv1.WatchFilesRequest{SandboxId: id, Path: "/home/workspace/../etc"}, codes.InvalidArgument, "clean absolute directory"},
		{"no such directory", ctx, &executorv1.WatchFilesRequest{SandboxId: id, Path: "/home/workspace/nope"}, codes.FailedPrecondition, "no such file or directory"},
		{"a file", ctx, &executorv1.WatchFilesRequest{SandboxId: id, Path: "/etc/hostname"}, codes.FailedPrecondition, "not a directory"},
		{"another account's", as(t, "mallory"), &executorv1.WatchFilesRequest{SandboxId: id}, codes.NotFound, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := x.client.WatchFiles(tc.ctx, &executorv1.WatchFilesRequest{SandboxId: tc.req.GetSandboxId(), Path: tc.req.GetPath()})
			if err == nil {
				_, err = s.Recv()
			}
			wantCode(t, err, tc.code, tc.msg)
		})
	}
}

func TestParseWatchEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		ok   bool
	}{
		{`{"op":"create","path":"/home/workspace/a"}`, true},
		{`{"op":"ready","path":"/home/workspace"}`, true},
		{`{"op":"coalesced","dropped":3}`, true},
		{`{"op":"coalesced","overflow":true}`, true},
		{`{"op":"create"}`, false},
		{`{"op":"create","path":"relative"}`, false},
		{`{"op":"create","path":"/a","dropped":1}`, false},
		{`{"op":"coalesced"}`, false},
		{`{"op":"coalesced","dropped":-1}`, false},
		{`{"op":"coalesced","path":"/a","dropped":1}`, false},
		{`{"op":"chmod","path":"/a"}`, false},
		{`{"op":"create","path":"/a","extra":1}`, false},
		{`not json`, false},
		// Decoding makes a string UTF-8: what was not is replaced.
		{"{\"op\":\"create\",\"path\":\"/a\xff\"}", true},
	} {
		_, err := parseWatchEvent([]byte(tc.line))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.line, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "watcher") {
			t.Errorf("%s: %v does not say the watcher wrote it", tc.line, err)
		}
	}
}
