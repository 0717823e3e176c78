package localcluster

import (
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// startSleeper starts a process in a group of its own, as the cluster
// starts its members, and returns its state as a member of kind and a
// channel closed once it has exited: it is reaped as it dies, as a
// detached cluster's orphans are reaped by init.
func startSleeper(t *testing.T, name, kind string) (MemberState, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	start, _, err := procStat(cmd.Process.Pid)
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	if err != nil {
		t.Fatal(err)
	}
	return MemberState{Name: name, Kind: kind, PID: cmd.Process.Pid, StartTime: start}, exited
}

func TestDownStopsLiveMembersOnly(t *testing.T) {
	dir := t.TempDir()
	router, routerExited := startSleeper(t, "router-0", KindRouter)
	etcd, etcdExited := startSleeper(t, "etcd-0", KindEtcd)
	// A member whose recorded start time is not its PID's: the PID
	// was reused by another process, which must be left alone.
	stranger, strangerExited := startSleeper(t, "executor-0", KindExecutor)
	stranger.StartTime++
	if err := writeState(dir, &State{Members: []MemberState{router, etcd, stranger}}); err != nil {
		t.Fatal(err)
	}
	live, err := Live(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range live {
		names = append(names, m.Name)
	}
	if want := []string{"router-0", "etcd-0"}; !slices.Equal(names, want) {
		t.Fatalf("Live = %v, want %v", names, want)
	}

	exited := map[string]<-chan struct{}{"router-0": routerExited, "etcd-0": etcdExited, "executor-0": strangerExited}
	if err := Down(dir, 5*time.Second); err != nil {
		t.Fatalf("Down: %v", err)
	}
	for _, name := range []string{"router-0", "etcd-0"} {
		select {
		case <-exited[name]:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still runs after Down", name)
		}
	}
	select {
	case <-exited["executor-0"]:
		t.Fatal("Down killed a process whose PID the state recorded for another start time")
	default:
	}
	s, err := ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Members {
		if m.Name != "executor-0" && m.PID != 0 {
			t.Errorf("%s still recorded as PID %d", m.Name, m.PID)
		}
	}
}

func TestStopBatches(t *testing.T) {
	members := []MemberState{
		{Name: "etcd-0", Kind: KindEtcd}, {Name: "etcd-1", Kind: KindEtcd}, {Name: "minio", Kind: KindMinIO},
		{Name: "workspace-0", Kind: KindWorkspace}, {Name: "router-0", Kind: KindRouter},
	}
	var got [][]string
	for _, batch := range stopBatches(members) {
		var names []string
		for _, i := range batch {
			names = append(names, members[i].Name)
		}
		got = append(got, names)
	}
	want := [][]string{{"workspace-0", "router-0"}, {"minio"}, {"etcd-0"}, {"etcd-1"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("stopBatches = %v, want %v", got, want)
	}
}
