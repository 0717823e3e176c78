package audit

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/workspace/store/fsstore"
)

const crashFlush = 200 * time.Millisecond

// TestCrashLosesAtMostTheWindow kills a writing process with SIGKILL: every
// record written more than one flush interval (plus the time a flush
// takes) before the kill is stored, and what is stored verifies.
func TestCrashLosesAtMostTheWindow(t *testing.T) {
	if os.Getenv("CONCH_AUDIT_CRASH_CHILD") != "" {
		crashChild(t)
		return
	}
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestCrashLosesAtMostTheWindow$")
	cmd.Env = append(os.Environ(), "CONCH_AUDIT_CRASH_CHILD=1", "CONCH_AUDIT_CRASH_DIR="+dir, "CONCH_AUDIT_CRASH_ETCD="+strings.Join(cli.Endpoints(), ","))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	written := map[int64]time.Time{}
	sc := bufio.NewScanner(out)
	deadline := time.Now().Add(20 * time.Second)
	for sc.Scan() && time.Now().Before(deadline) {
		seq, err := strconv.ParseInt(strings.TrimPrefix(sc.Text(), "wrote "), 10, 64)
		if err != nil {
			continue
		}
		written[seq] = time.Now()
		if seq == 400 { // several flushes in, mid-window
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = cmd.Wait()
	if len(written) < 400 {
		t.Fatalf("the child wrote %d records", len(written))
	}
	st, err := fsstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(ctx, st, cli, DefaultEtcdPrefix, "acme")
	if err != nil || rep.Problem != nil {
		t.Fatalf("verify after a crash: %+v %v", rep, err)
	}
	stored := int64(rep.Records)
	// A flush takes a store write and an etcd put: allow a second for it.
	for seq, at := range written {
		if seq > stored && at.Before(killed.Add(-crashFlush-time.Second)) {
			t.Fatalf("record %d written %v before the kill was lost (stored up to %d)", seq, killed.Sub(at), stored)
		}
	}
	if stored == 0 || stored > int64(len(written)) {
		t.Fatalf("stored %d of %d", stored, len(written))
	}
	t.Logf("written %d, stored %d, lost %d (window %v)", len(written), stored, int64(len(written))-stored, crashFlush)
}

// crashChild writes a record every millisecond, saying so after each.
func crashChild(t *testing.T) {
	ctx := t.Context()
	st, err := fsstore.New(os.Getenv("CONCH_AUDIT_CRASH_DIR"))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := etcdx.NewClient(ctx, etcdx.ClientOptions{Endpoints: strings.Split(os.Getenv("CONCH_AUDIT_CRASH_ETCD"), ",")})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(Config{Store: st, Etcd: cli, Name: "crash", FlushEvery: crashFlush})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.Run(ctx) }()
	for i := int64(1); ; i++ {
		w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: "echo " + strconv.FormatInt(i, 10)})
		fmt.Printf("wrote %d\n", i)
		time.Sleep(time.Millisecond)
	}
}
