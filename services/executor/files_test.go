package executor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	executorv1 "github.com/conch-sh/conch/gen/go/conch/executor/v1"
)

// upload writes data to path of sandbox id in chunks of chunk bytes.
func upload(ctx context.Context, c executorv1.ExecutorServiceClient, id, path string, data []byte, chunk int) (*executorv1.SandboxFile, error) {
	s, err := c.WriteFile(ctx)
	if err != nil {
		return nil, err
	}
	first := &executorv1.WriteFileRequest{SandboxId: id, Path: path}
	for {
		n := min(chunk, len(data))
		first.Data = data[:n]
		if err := s.Send(first); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		data, first = data[n:], &executorv1.WriteFileRequest{}
		if len(data) == 0 {
			break
		}
	}
	resp, err := s.CloseAndRecv()
	return resp.GetFile(), err
}

// download reads path of sandbox id.
func download(ctx context.Context, c executorv1.ExecutorServiceClient, id, path string) (*executorv1.SandboxFile, []byte, error) {
	s, err := c.ReadFile(ctx, &executorv1.ReadFileRequest{SandboxId: id, Path: path})
	if err != nil {
		return nil, nil, err
	}
	var f *executorv1.SandboxFile
	var data bytes.Buffer
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return f, data.Bytes(), nil
		}
		if err != nil {
			return nil, nil, err
		}
		if m.GetFile() != nil {
			f = m.GetFile()
		}
		data.Write(m.GetData())
	}
}

func run(t *testing.T, x *testExecutor, ctx context.Context, id, command string) string {
	t.Helper()
	resp, err := x.client.RunCommand(ctx, &executorv1.RunCommandRequest{SandboxId: id, Command: command})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOutcome().GetExitCode() != 0 {
		t.Fatalf("%s: %v %q %q", command, resp.GetOutcome(), resp.GetStdout(), resp.GetStderr())
	}
	return resp.GetStdout()
}

func TestFileCalls(t *testing.T) {
	x := startExecutor(t)
	id := createSandbox(t, x, "acme")
	ctx := as(t, "acme")
	c := x.client

	content := bytes.Repeat([]byte("0123456789abcdef"), 50000) // 800,000 bytes: several messages each way
	f, err := upload(ctx, c, id, "/home/workspace/sub/dir/data.bin", content, 100000)
	if err != nil {
		t.Fatal(err)
	}
	if f.GetPath() != "/home/workspace/sub/dir/data.bin" || f.GetSize() != int64(len(content)) || !f.GetWrittenByApi() {
		t.Fatalf("written = %v", f)
	}
	got, data, err := download(ctx, c, id, f.GetPath())
	if err != nil || !bytes.Equal(data, content) || got.GetSize() != f.GetSize() {
		t.Fatalf("read back: %v, %d bytes, err %v", got, len(data), err)
	}
	// The sandbox's user owns what was written, parents included, and may
	// change it.
	if out := run(t, x, ctx, id, `stat -c %u sub sub/dir sub/dir/data.bin | sort -u; id -u; echo more >> sub/dir/data.bin && echo made > shell.txt`); len(strings.Fields(out)) != 2 || strings.Fields(out)[0] != strings.Fields(out)[1] {
		t.Fatalf("owners and uid = %q, want one owner, the sandbox's uid", out)
	}

	list, err := c.ListFiles(ctx, &executorv1.ListFilesRequest{SandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list.GetFiles() {
		names = append(names, f.GetPath())
		if f.GetWrittenByApi() {
			t.Errorf("%s written by the API after the shell changed it", f.GetPath())
		}
	}
	if strings.Join(names, " ") != "/home/workspace/shell.txt /home/workspace/sub/dir/data.bin" {
		t.Fatalf("list = %v", names)
	}

	// Replacing a file, then deleting it.
	if f, err = upload(ctx, c, id, "/home/workspace/shell.txt", []byte("new"), 10); err != nil || f.GetSize() != 3 {
		t.Fatalf("replace: %v %v", f, err)
	}
	if st, err := c.StatFile(ctx, &executorv1.StatFileRequest{SandboxId: id, Path: "/home/workspace/shell.txt"}); err != nil || !st.GetFile().GetWrittenByApi() {
		t.Fatalf("stat = %v %v", st, err)
	}
	if _, err := c.DeleteFile(ctx, &executorv1.DeleteFileRequest{SandboxId: id, Path: "/home/workspace/shell.txt"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.StatFile(ctx, &executorv1.StatFileRequest{SandboxId: id, Path: "/home/workspace/shell.txt"})
	wantCode(t, err, codes.NotFound, "not found")

	// Another account sees no such sandbox.
	_, err = c.ListFiles(as(t, "other"), &executorv1.ListFilesRequest{SandboxId: id})
	wantCode(t, err, codes.NotFound, "not found")
	_, err = upload(as(t, "other"), c, id, "/home/workspace/x", []byte("x"), 10)
	wantCode(t, err, codes.NotFound, "not found")
}

func TestSandboxKeepsItsName(t *testing.T) {
	x := startExecutor(t)
	ctx := as(t, "acme")
	name := strings.Repeat("☃", MaxNameChars)
	resp, err := x.client.CreateSandbox(ctx, &executorv1.CreateSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = x.client.DestroySandbox(ctx, &executorv1.DestroySandboxRequest{Id: resp.GetId()}) })
	got, err := x.client.GetSandbox(ctx, &executorv1.GetSandboxRequest{Id: resp.GetId()})
	if err != nil || got.GetSandbox().GetName() != name || resp.GetSandbox().GetName() != name {
		t.Fatalf("name = %q, %q (%v), want %q", resp.GetSandbox().GetName(), got.GetSandbox().GetName(), err, name)
	}
}

func TestFileCallsStayInTheWorkspace(t *testing.T) {
	x := startExecutor(t)
	id := createSandbox(t, x, "acme")
	ctx := as(t, "acme")
	c := x.client
	run(t, x, ctx, id, `ln -s /etc etc && ln -s /etc/hostname hostname && ln -s .. up && mkdir d && echo in > d/f`)

	cases := []struct {
		path string
		code codes.Code
		msg  string
	}{
		{"/home/workspace", codes.InvalidArgument, "path: must be"},
		{"/home/workspace/", codes.InvalidArgument, "path: must be"},
		{"/home/workspace/../workspace/d/f", codes.InvalidArgument, "path: must be"},
		{"/home/workspace/d/../d/f", codes.InvalidArgument, "path: must be"},
		{"d/f", codes.InvalidArgument, "path: must be"},
		{"/etc/hostname", codes.InvalidArgument, "path: must be"},
		{"/home/workspace/etc/hostname", codes.InvalidArgument, "symlink"},
		{"/home/workspace/up/workspace/d/f", codes.InvalidArgument, "symlink"},
		{"/home/workspace/hostname", codes.InvalidArgument, "symlink"},
		{"/home/workspace/missing", codes.NotFound, "not found"},
		{"/home/workspace/d", codes.NotFound, "not a regular file"},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			_, _, err := download(ctx, c, id, tc.path)
			wantCode(t, err, tc.code, tc.msg)
			_, err = c.StatFile(ctx, &executorv1.StatFileRequest{SandboxId: id, Path: tc.path})
			wantCode(t, err, tc.code, tc.msg)
		})
	}
	for _, p := range []string{"/home/workspace/etc/conch-escape", "/home/workspace/up/conch-escape", "/home/workspace/../conch-escape"} {
		if _, err := upload(ctx, c, id, p, []byte("x"), 10); status.Code(err) != codes.InvalidArgument {
			t.Errorf("write %s: %v, want InvalidArgument", p, err)
		}
	}
	// Writing over a symlink replaces the link, never its target.
	if _, err := upload(ctx, c, id, "/home/workspace/hostname", []byte("mine"), 10); err != nil {
		t.Fatal(err)
	}
	if out := run(t, x, ctx, id, `test ! -L hostname && cat hostname; cat /etc/hostname >/dev/null; ls /etc | grep -c conch-escape || true`); out != "mine0\n" {
		t.Fatalf("after writes: %q", out)
	}
	// Deleting refuses what is not a regular file.
	for _, p := range []string{"/home/workspace/etc", "/home/workspace/d", "/home/workspace/up"} {
		_, err := c.DeleteFile(ctx, &executorv1.DeleteFileRequest{SandboxId: id, Path: p})
		wantCode(t, err, codes.NotFound, "not a regular file")
	}
	list, err := c.ListFiles(ctx, &executorv1.ListFilesRequest{SandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list.GetFiles() {
		names = append(names, f.GetPath())
	}
	if strings.Join(names, " ") != "/home/workspace/d/f /home/workspace/hostname" {
		t.Fatalf("list = %v, want no symlink followed", names)
	}
}

func TestFileWriteFailureLeavesNothing(t *testing.T) {
	x := startExecutor(t)
	id := createSandbox(t, x, "acme")
	ctx := as(t, "acme")
	c := x.client
	if _, err := upload(ctx, c, id, "/home/workspace/keep.txt", []byte("old"), 10); err != nil {
		t.Fatal(err)
	}

	// Beyond the limit: refused, the old content kept.
	big := make([]byte, MaxFileBytes+1)
	_, err := upload(ctx, c, id, "/home/workspace/keep.txt", big, 1<<20)
	wantCode(t, err, codes.ResourceExhausted, "limit of 104857600 bytes")

	// An upload its client gives up on.
	cctx, cancel := context.WithCancel(ctx)
	s, err := c.WriteFile(cctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&executorv1.WriteFileRequest{SandboxId: id, Path: "/home/workspace/keep.txt", Data: []byte("partial")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&executorv1.WriteFileRequest{SandboxId: id, Path: "/home/workspace/half.txt", Data: []byte("partial")}); err != nil {
		t.Fatal(err)
	}
	cancel()
	// Receive without closing the send side: a half-close racing the
	// cancellation would end the upload normally, as a client that
	// finished it.
	if err := s.RecvMsg(new(executorv1.WriteFileResponse)); err == nil {
		t.Fatal("a canceled upload succeeded")
	}

	if out := run(t, x, ctx, id, `ls -A; cat keep.txt`); out != "keep.txt\nold" {
		t.Fatalf("workspace after failed writes: %q", out)
	}
}
