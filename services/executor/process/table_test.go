package process

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestLines(t *testing.T) {
	t.Parallel()
	r := NewRecord("p", "s", "cmd", false, false, nil, nil)
	r.Append([]byte("a\nb\nc\n"))
	cases := []struct {
		offset, limit int64
		max           int
		want          string
		next, total   int64
	}{
		{0, 0, 1000, "a\nb\nc", 3, 3},
		{1, 1, 1000, "b", 2, 3},
		{2, 5, 1000, "c", 3, 3},
		{5, 0, 1000, "", 5, 3},
		{-1, 1, 1000, "a", 1, 3},
		{0, 0, 3, "a\nb", 2, 3},
	}
	for _, c := range cases {
		got, next, total := r.Lines(c.offset, c.limit, c.max)
		if got != c.want || next != c.next || total != c.total {
			t.Errorf("Lines(%d, %d, %d) = %q %d %d, want %q %d %d", c.offset, c.limit, c.max, got, next, total, c.want, c.next, c.total)
		}
	}
}

func TestPollKeepsOnlyTheLogLimit(t *testing.T) {
	t.Parallel()
	r := NewRecord("p", "s", "cmd", false, false, nil, nil)
	chunk := []byte(strings.Repeat("x", 1000))
	for range 2 * MaxLog / len(chunk) {
		r.Append(chunk)
	}
	if s := r.Snapshot(); s.OutputBytes != int64(2*MaxLog/len(chunk)*len(chunk)) {
		t.Fatalf("output bytes %d", s.OutputBytes)
	}
	_, out, truncated := r.Poll(t.Context(), 0, 10)
	if len(out) != 10 || !truncated {
		t.Fatalf("poll returned %d bytes truncated=%v", len(out), truncated)
	}
	r.mu.Lock()
	kept := len(r.log)
	r.mu.Unlock()
	if kept > MaxLog {
		t.Fatalf("record keeps %d bytes, limit %d", kept, MaxLog)
	}
}

func TestPollWaitsForOutputOrEnd(t *testing.T) {
	t.Parallel()
	r := NewRecord("p", "s", "cmd", false, false, nil, nil)
	go r.Append([]byte("late"))
	_, out, _ := r.Poll(t.Context(), time.Minute, 100)
	for len(out) == 0 { // the append may land between the check and the wait
		_, out, _ = r.Poll(t.Context(), time.Minute, 100)
	}
	if string(out) != "late" {
		t.Fatalf("poll got %q", out)
	}
	go r.End(3, false, "")
	if err := r.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := r.Poll(t.Context(), time.Minute, 100); s.Running || s.ExitCode != 3 {
		t.Fatalf("snapshot %+v", s)
	}
}

func TestSweepForgetsAfterRetention(t *testing.T) {
	t.Parallel()
	tab := NewTable(30 * time.Minute)
	running := NewRecord("run", "s", "sleep", false, false, nil, nil)
	ended := NewRecord("end", "s", "true", false, false, nil, nil)
	ended.End(0, false, "")
	tab.Add(running)
	tab.Add(ended)
	tab.Sweep(time.Now().Add(29 * time.Minute))
	if len(tab.List("s")) != 2 {
		t.Fatal("forgot a record before its retention")
	}
	tab.Sweep(time.Now().Add(31 * time.Minute))
	if _, err := tab.Get("s", "end"); err != ErrNotFound {
		t.Fatalf("ended record kept past retention: %v", err)
	}
	if _, err := tab.Get("s", "run"); err != nil {
		t.Fatalf("running record forgotten: %v", err)
	}
}

func TestTableKeepsAtMostMaxRecords(t *testing.T) {
	t.Parallel()
	tab := NewTable(30 * time.Minute)
	running := NewRecord("running", "s", "sleep", false, false, nil, nil)
	tab.Add(running)
	for i := range MaxRecords + 10 {
		r := NewRecord(fmt.Sprintf("p%d", i), "s", "true", false, false, nil, nil)
		r.End(0, false, "")
		tab.Add(r)
	}
	if n := len(tab.List("s")); n != MaxRecords {
		t.Fatalf("%d records kept, want %d", n, MaxRecords)
	}
	if _, err := tab.Get("s", "running"); err != nil {
		t.Fatal("a running process was forgotten")
	}
	if _, err := tab.Get("s", fmt.Sprintf("p%d", MaxRecords+9)); err != nil {
		t.Fatal("the newest record was forgotten")
	}
	// The finished ones added first went first.
	for i, want := range map[int]bool{0: false, 10: false, 11: true} {
		if _, err := tab.Get("s", fmt.Sprintf("p%d", i)); (err == nil) != want {
			t.Errorf("p%d kept = %v, want %v", i, err == nil, want)
		}
	}
	// After a sweep forgets them all, the table fills again to the bound.
	tab.Sweep(time.Now().Add(time.Hour))
	for i := range 2*MaxRecords + 5 {
		r := NewRecord(fmt.Sprintf("q%d", i), "s", "true", false, false, nil, nil)
		r.End(0, false, "")
		tab.Add(r)
	}
	if n := len(tab.List("s")); n != MaxRecords {
		t.Fatalf("after a sweep and more: %d records kept, want %d", n, MaxRecords)
	}
	if _, err := tab.Get("s", "running"); err != nil {
		t.Fatal("a running process was forgotten")
	}
}
