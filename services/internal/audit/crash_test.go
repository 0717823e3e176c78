package audit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
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

// pausing is a writer's real store that stops the writer at one point of
// a segment's write, where the test kills its process.
type pausing struct {
	store.Store
	armed atomic.Bool
	// after stops once the segment is stored, else before it is.
	after bool
}

func (p *pausing) Put(ctx context.Context, key string, r io.Reader, o store.PutOptions) (store.Info, error) {
	if !p.armed.Load() {
		return p.Store.Put(ctx, key, r, o)
	}
	if p.after {
		if _, err := p.Store.Put(ctx, key, r, o); err != nil {
			return store.Info{}, err
		}
	}
	fmt.Println("paused")
	<-ctx.Done()
	return store.Info{}, ctx.Err()
}

// TestKillBetweenSegmentAndAnchor kills a writing process with SIGKILL
// while it writes a segment, before and after the segment is stored: the
// trail verifies as it is, with no "segment has no anchor" left behind,
// and a writer started after goes on with it.
func TestKillBetweenSegmentAndAnchor(t *testing.T) {
	if c := os.Getenv("CONCH_AUDIT_PAUSE_CHILD"); c != "" {
		pauseChild(t, c == "after")
		return
	}
	cli := etcdxtest.StartForTest(t)
	for i, tc := range []struct {
		name  string
		after bool
		// records is what verifies after the kill: the first segment's,
		// and the second's once it is stored.
		records, segments int
	}{
		{name: "before the segment is stored", records: 3, segments: 1},
		{name: "after the segment is stored", after: true, records: 6, segments: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			prefix := fmt.Sprintf("/kill%d/", i)
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestKillBetweenSegmentAndAnchor$")
			cmd.Env = append(os.Environ(), "CONCH_AUDIT_PAUSE_CHILD="+map[bool]string{true: "after", false: "before"}[tc.after],
				"CONCH_AUDIT_CRASH_DIR="+dir, "CONCH_AUDIT_CRASH_ETCD="+strings.Join(cli.Endpoints(), ","), "CONCH_AUDIT_CRASH_PREFIX="+prefix)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			paused := false
			for sc := bufio.NewScanner(out); !paused && sc.Scan(); {
				paused = sc.Text() == "paused"
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if !paused {
				t.Fatal("the child ended before it wrote its second segment")
			}
			st, err := fsstore.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Verify(ctx, st, cli, prefix, "acme")
			if err != nil || rep.Problem != nil || rep.Records != tc.records || rep.Segments != tc.segments {
				t.Fatalf("verify after the kill: %+v %v %v; want %d records in %d segments", rep, rep.Problem, err, tc.records, tc.segments)
			}
			// The next start of the process writes chains of its own
			// beside what the killed one left.
			w, err := NewWriter(Config{Store: st, Etcd: cli, EtcdPrefix: prefix, Name: "crash"})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.WriteSync(ctx, Record{Kind: KindCommand, Account: "acme", Command: "after the restart"}); err != nil {
				t.Fatal(err)
			}
			rep, err = Verify(ctx, st, cli, prefix, "acme")
			if err != nil || rep.Problem != nil || rep.Records != tc.records+1 {
				t.Fatalf("verify after the restart: %+v %v %v", rep, rep.Problem, err)
			}
		})
	}
}

// pauseChild writes a segment of three records, then another, which its
// store stops in the middle of.
func pauseChild(t *testing.T, after bool) {
	ctx := t.Context()
	fs, err := fsstore.New(os.Getenv("CONCH_AUDIT_CRASH_DIR"))
	if err != nil {
		t.Fatal(err)
	}
	st := &pausing{Store: fs, after: after}
	cli, err := etcdx.NewClient(ctx, etcdx.ClientOptions{Endpoints: strings.Split(os.Getenv("CONCH_AUDIT_CRASH_ETCD"), ",")})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(Config{Store: st, Etcd: cli, EtcdPrefix: os.Getenv("CONCH_AUDIT_CRASH_PREFIX"), Name: "crash", FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for seg := range 2 {
		for i := range 3 {
			w.Write(ctx, Record{Kind: KindCommand, Account: "acme", Command: fmt.Sprintf("echo %d", seg*3+i)})
		}
		st.armed.Store(seg == 1)
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
