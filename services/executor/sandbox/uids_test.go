package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// uidHolderEnv makes the test binary a process that claims uids and holds
// them until it is killed: an executor that dies with live sandboxes.
const uidHolderEnv = "CONCH_TEST_UID_HOLDER"

// runUIDHolder claims the uids asked for in uidHolderEnv ("dir base count
// n"), prints them, and holds them until its input ends.
func runUIDHolder(spec string) error {
	var dir string
	var base, count, n int
	if _, err := fmt.Sscan(spec, &dir, &base, &count, &n); err != nil {
		return fmt.Errorf("uid holder: %q: %w", spec, err)
	}
	c, err := newUIDClaims(dir, base, count)
	if err != nil {
		return err
	}
	for range n {
		uid, err := c.claim()
		if err != nil {
			return err
		}
		fmt.Println(uid)
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return nil
}

// Two executors on one host, building sandboxes at once, never give the
// same host uid to two live sandboxes.
func TestUIDsUniqueAcrossExecutors(t *testing.T) {
	t.Parallel()
	var rts []*Runtime
	for i := range 2 {
		dir, err := os.MkdirTemp("", "conch-uids-")
		if err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(dir, 0o711)
		// Both runtimes start at the same base, as two executors with the
		// default config do.
		r, err := NewRuntime(Config{Seccomp: filter(t), StateDir: filepath.Join(dir, "state"), CgroupParent: fmt.Sprintf("conch-test/uids%d-%s", i, filepath.Base(dir))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			r.Close()
			_ = os.RemoveAll(dir)
		})
		rts = append(rts, r)
	}
	const each = 4
	var (
		mu   sync.Mutex
		sbs  []*Sandbox
		errs []error
		wg   sync.WaitGroup
	)
	for i, r := range rts {
		for j := range each {
			wg.Go(func() {
				sb, err := r.Create(t.Context(), Spec{ID: fmt.Sprintf("u%d-%d-%d", os.Getpid(), i, j)})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				sbs = append(sbs, sb)
			})
		}
	}
	wg.Wait()
	for _, sb := range sbs {
		t.Cleanup(func() { _ = sb.Destroy(t.Context()) })
	}
	for _, err := range errs {
		t.Fatal(err)
	}
	seen := map[int]string{}
	for _, sb := range sbs {
		if other, ok := seen[sb.HostUID()]; ok {
			t.Errorf("uid %d given to both %s and %s", sb.HostUID(), other, sb.ID())
		}
		seen[sb.HostUID()] = sb.ID()
		// The uid is the one the sandbox's processes run as on the host.
		pids, err := sb.HostPIDs()
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range pids {
			st, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
			if err == nil && int(st.Sys().(*syscall.Stat_t).Uid) != sb.HostUID() {
				t.Errorf("process %d of %s runs as %d, want %d", pid, sb.ID(), st.Sys().(*syscall.Stat_t).Uid, sb.HostUID())
			}
		}
	}
}

// A uid held by another claimant is skipped; one given back, or held by a
// process that died, is free again.
func TestUIDClaims(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const base, count = 300000, 3
	a, err := newUIDClaims(dir, base, count)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	b, err := newUIDClaims(dir, base, count)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)

	// Another executor process holds two of the three uids.
	holder := exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d 2", uidHolderEnv, dir, base, count))
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	held := map[int]bool{}
	lines := bufio.NewScanner(stdout)
	for range 2 {
		if !lines.Scan() {
			t.Fatalf("holder ended: %v", lines.Err())
		}
		uid, err := strconv.Atoi(strings.TrimSpace(lines.Text()))
		if err != nil {
			t.Fatal(err)
		}
		held[uid] = true
	}

	got, err := a.claim()
	if err != nil {
		t.Fatal(err)
	}
	if held[got] || got < base || got >= base+count {
		t.Fatalf("claimed %d; the holder has %v", got, held)
	}
	if uid, err := b.claim(); err == nil {
		t.Fatalf("claimed %d while every uid is held", uid)
	}
	a.release(got)
	if uid, err := b.claim(); err != nil || uid != got {
		t.Fatalf("after release claimed %d, %v; want %d", uid, err, got)
	}

	// The holder dies without giving anything back: the kernel drops its
	// locks, and its uids are free.
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	for range 2 {
		uid, err := a.claim()
		if err != nil {
			t.Fatalf("uids of a dead holder stay claimed: %v", err)
		}
		if !held[uid] {
			t.Fatalf("claimed %d, want one of the dead holder's %v", uid, held)
		}
		delete(held, uid)
	}
	if _, err := b.claim(); err == nil {
		t.Fatal("claimed a uid while every uid is held")
	}
}
