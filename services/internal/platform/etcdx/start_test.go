package etcdx

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/internal/platform/dirlock"
)

// closeDeadline is how long a test lets Close take before it calls Close
// stuck: generous, for a loaded machine; Close takes well under a second.
const closeDeadline = 10 * time.Second

func TestASecondEtcdOnADirIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := StartEmbedded(t.Context(), EmbeddedOptions{Dir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	peer, err := freeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	client, err := freeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	starts := []struct {
		name  string
		start func() (*Embedded, error)
	}{
		{"StartEmbedded", func() (*Embedded, error) {
			return StartEmbedded(t.Context(), EmbeddedOptions{Dir: dir, UnsafeNoFsync: true})
		}},
		{"StartMember", func() (*Embedded, error) {
			return StartMember(t.Context(), MemberOptions{Name: "m", Dir: dir, ClientURL: client.String(), PeerURL: peer.String(),
				InitialCluster: "m=" + peer.String(), UnsafeNoFsync: true})
		}},
	}
	for _, tt := range starts {
		t.Run(tt.name, func(t *testing.T) {
			second, err := tt.start()
			if err == nil {
				second.Close()
				t.Fatal("a second etcd started on a dir in use")
			}
			var held *dirlock.HeldError
			if !errors.As(err, &held) || held.PID != os.Getpid() || held.Dir != dir {
				t.Fatalf("error = %v, want a *dirlock.HeldError naming %s and pid %d", err, dir, os.Getpid())
			}
		})
	}
}

// lockedBackends keeps the files TestStartEndsWithItsContext locks open.
var lockedBackends []*os.File

// TestStartEndsWithItsContext holds the lock on etcd's backend as an etcd
// conch did not start would: etcd waits for it without bound, the start
// must not.
func TestStartEndsWithItsContext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e, err := StartEmbedded(t.Context(), EmbeddedOptions{Dir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	db, err := os.OpenFile(filepath.Join(dir, "member", "snap", "db"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(db.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	// db stays open and locked to the end of the test binary: the etcd
	// left starting would otherwise start in a directory being removed.
	// Kept reachable: a file the collector finalizes is closed, and its
	// lock goes with it.
	lockedBackends = append(lockedBackends, db)

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if e, err := StartEmbedded(ctx, EmbeddedOptions{Dir: dir, UnsafeNoFsync: true}); !errors.Is(err, context.DeadlineExceeded) {
		if e != nil {
			e.Close()
		}
		t.Fatalf("StartEmbedded while etcd's backend is locked = %v, want it to end with its context", err)
	}
}

// TestAMemberWithoutQuorumCloses starts one member of three: it never
// serves, and closing it must not wait for the others.
func TestAMemberWithoutQuorumCloses(t *testing.T) {
	t.Parallel()
	var peers []string
	for range 3 {
		u, err := freeLoopbackURL()
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, u.String())
	}
	client, err := freeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m, err := StartMember(t.Context(), MemberOptions{
		Name: "a", Dir: dir, ClientURL: client.String(), PeerURL: peers[0],
		InitialCluster: "a=" + peers[0] + ",b=" + peers[1] + ",c=" + peers[2], UnsafeNoFsync: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		m.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(closeDeadline):
		t.Fatalf("Close of a member without quorum still running after %v", closeDeadline)
	}
	// Closed, it gives its dir up.
	l, err := dirlock.Acquire(dir, "test")
	if err != nil {
		t.Fatalf("dir still held after Close: %v", err)
	}
	_ = l.Release()
}
