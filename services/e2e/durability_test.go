package e2e

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	workspacev1 "github.com/conch-sh/conch/gen/go/conch/workspace/v1"
	"github.com/conch-sh/conch/services/internal/platform/discovery"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
)

// TestWorkspaceDurability runs the services as separate processes on real
// MinIO, kills the workspace service with SIGKILL in the middle of an
// upload, and checks that acknowledged files survive and that no part of
// the interrupted one is visible after a restart.
func TestWorkspaceDurability(t *testing.T) {
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cli := etcdxtest.StartForTest(t)
	m := miniotest.Start(t)
	const adminKey = "durability-admin-key-0123456789"
	env := append(cleanEnv(),
		"CONCH_ETCD_ENDPOINTS="+strings.Join(cli.Endpoints(), ","),
		"CONCH_INTERNAL_SECRET=durability-secret-0123456789",
		"CONCH_ADMIN_KEY="+adminKey,
		"CONCH_LOG_LEVEL=warn",
		"CONCH_S3_ENDPOINT="+m.Endpoint,
		"CONCH_S3_ACCESS_KEY="+m.AccessKey,
		"CONCH_S3_SECRET_KEY="+m.SecretKey,
		"CONCH_S3_BUCKET="+miniotest.Bucket(),
		"CONCH_RESPONSES_DIR="+t.TempDir(),
		"CONCH_SIGNING_KEYS=k1:durability-signing-key-0123456789abcdef",
		"CONCH_SECRETS_KEY="+sealtest.KeyText(t),
	)
	start := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out := &lockedBuffer{}
		cmd.Stderr = out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("conch %s stderr:\n%s", args[0], tail(out.String(), 2000))
			}
		})
		return cmd
	}
	workspace := start("workspace")
	start("approval")
	start("executor")
	httpAddr := freeAddr(t)
	start("router", "--http-addr", httpAddr)
	d := &dev{t: t, URL: "http://" + httpAddr, Key: adminKey, waited: make(chan error)}
	d.waitReady(30 * time.Second)
	c := &fileClient{t: t, d: d, key: adminKey, user: "durable"}

	acked := make([]byte, 3<<20)
	_, _ = rand.Read(acked)
	if code, body := c.upload("/acked.bin", bytes.NewReader(acked), int64(len(acked))); code != http.StatusOK {
		t.Fatalf("upload = %d %s", code, body)
	}
	if code, body := c.call("POST", "/api/v1/shell/io/mkdir", map[string]string{"path": "/kept/empty"}); code != http.StatusOK {
		t.Fatalf("mkdir = %d %s", code, body)
	}

	// An upload in flight when the service dies.
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code, _ := c.upload("/partial.bin", pr, -1)
		done <- code
	}()
	chunk := make([]byte, 1<<20)
	for range 12 {
		if _, err := pw.Write(chunk); err != nil {
			t.Fatalf("write body: %v", err)
		}
	}
	if err := workspace.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = workspace.Process.Wait()
	_ = pw.CloseWithError(fmt.Errorf("client gave up"))
	if code := <-done; code == http.StatusOK {
		t.Fatal("the interrupted upload was acknowledged")
	}

	workspace = start("workspace")
	waitStatus(t, d, "/readyz", http.StatusOK)
	resp, body := c.download("/acked.bin")
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, acked) {
		t.Fatalf("acknowledged file after the crash = %d, %d bytes", resp.StatusCode, len(body))
	}
	if code, body := c.call("GET", "/api/v1/shell/io/stat?path=/partial.bin", nil); code != http.StatusNotFound {
		t.Fatalf("interrupted upload visible: %d %s", code, body)
	}
	if got := c.list("/"); strings.Join(got, ",") != "acked.bin,kept/" {
		t.Fatalf("list after the crash = %v", got)
	}
	if got := c.list("/kept"); strings.Join(got, ",") != "empty/" {
		t.Fatalf("list /kept after the crash = %v", got)
	}
	// The restarted service writes normally (its predecessor's locks are
	// gone with its lease).
	if code, body := c.upload("/after.txt", strings.NewReader("after"), -1); code != http.StatusOK {
		t.Fatalf("upload after restart = %d %s", code, body)
	}

	// Flushes, as the executor sends them, killed before and during the
	// commit.
	signer, err := tenant.NewSigner("durability-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := discovery.Dial(t.Context(), cli, "workspace",
		grpc.WithChainStreamInterceptor(signer.StreamClientInterceptor()),
		grpc.WithChainUnaryInterceptor(signer.UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ws := workspacev1.NewWorkspaceServiceClient(conn)
	ctx := tenant.With(t.Context(), tenant.Scope{Account: "admin"})
	content := func(i, round int) string { return strings.Repeat(fmt.Sprintf("file %d round %d\n", i, round), 200) }
	sendFlush := func(round, n int, commit bool) (workspacev1.WorkspaceService_FlushClient, error) {
		stream, err := ws.Flush(ctx)
		if err != nil {
			return nil, err
		}
		msgs := []*workspacev1.FlushRequest{{Message: &workspacev1.FlushRequest_Begin{Begin: &workspacev1.FlushBegin{User: "durable"}}}}
		for i := range n {
			msgs = append(msgs,
				&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Entry{Entry: &workspacev1.Entry{Path: fmt.Sprintf("/sync/f%03d", i), Type: workspacev1.FileType_FILE_TYPE_FILE}}},
				&workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Data{Data: []byte(content(i, round))}})
		}
		if commit {
			msgs = append(msgs, &workspacev1.FlushRequest{Message: &workspacev1.FlushRequest_Commit{Commit: true}})
		}
		for _, m := range msgs {
			if err := stream.Send(m); err != nil {
				return stream, err
			}
		}
		return stream, nil
	}
	restart := func() {
		if err := workspace.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_, _ = workspace.Process.Wait()
		workspace = start("workspace")
		waitStatus(t, d, "/readyz", http.StatusOK)
	}
	const n = 150
	stream, err := sendFlush(1, n, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	// Round 2 is killed before its commit.
	if _, err := sendFlush(2, n, false); err != nil {
		t.Fatal(err)
	}
	restart()
	check := func(accept ...int) map[int]int {
		rounds := map[int]int{}
		for i := range n {
			resp, body := c.download(fmt.Sprintf("/sync/f%03d", i))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("f%03d = %d %s", i, resp.StatusCode, body)
			}
			ok := false
			for _, r := range accept {
				if string(body) == content(i, r) {
					rounds[r]++
					ok = true
				}
			}
			if !ok {
				t.Fatalf("f%03d holds %d bytes that are no whole round's content", i, len(body))
			}
		}
		return rounds
	}
	if got := check(1); got[1] != n {
		t.Fatalf("an uncommitted flush changed files: %v", got)
	}
	// Round 3 is killed right after its commit went out: each file is
	// whole, old or new, and the retried flush completes.
	if _, err := sendFlush(3, n, true); err != nil {
		t.Fatal(err)
	}
	restart()
	t.Logf("files of each round after a kill during the commit: %v", check(1, 3))
	stream, err = sendFlush(3, n, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := stream.CloseAndRecv()
	if err != nil {
		t.Fatalf("retried flush: %v", err)
	}
	if got := check(3); got[3] != n {
		t.Fatalf("after the retried flush: %v", got)
	}
	u, err := ws.GetUsage(ctx, &workspacev1.GetUsageRequest{User: "durable"})
	if err != nil || u.GetUsedFiles() != res.GetUsedFiles() {
		t.Fatalf("usage = %v, %v; flush said %d files", u, err, res.GetUsedFiles())
	}
}
