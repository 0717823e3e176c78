package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRealMain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := filepath.Join(dir, "bench.txt")
	const output = `pkg: github.com/conch-sh/conch/services/approval
BenchmarkResolveToWaiter-2   	      90	  12287894 ns/op	         1.120 p50-ms	        97.69 p99-ms	  319026 B/op	    3074 allocs/op
`
	if err := os.WriteFile(in, []byte(output), 0o644); err != nil {
		t.Fatal(err)
	}
	jsonPath := filepath.Join(dir, "report.json")
	var table strings.Builder
	if err := realMain([]string{"-json", jsonPath, in}, strings.NewReader(""), &table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), ":resolve to waiting command, p50") {
		t.Errorf("table has no :resolve row:\n%s", table.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Rows []struct {
			Metric string   `json:"metric"`
			Value  *float64 `json:"value"`
			Status string   `json:"status"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	statuses := map[string]int{}
	for _, r := range rep.Rows {
		statuses[r.Status]++
		if r.Metric == ":resolve to waiting command, p50" && (r.Value == nil || *r.Value != 1.12 || r.Status != "pass") {
			t.Errorf(":resolve row = %v %s, want 1.12 pass", r.Value, r.Status)
		}
	}
	if statuses["pass"] != 1 || statuses["skipped"] != len(rep.Rows)-1 {
		t.Errorf("statuses = %v, want one pass and the rest skipped", statuses)
	}
}
