package benchreport

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sample is real `make bench` output, cut down, with one benchmark that
// failed.
const sample = `goos: linux
goarch: amd64
pkg: github.com/conch-sh/conch/services/approval/policy
cpu: Intel(R) Xeon(R) Processor
BenchmarkEvaluate-2                	  100516	     11526 ns/op	    4857 B/op	      49 allocs/op
PASS
ok  	github.com/conch-sh/conch/services/approval/policy	2.316s
pkg: github.com/conch-sh/conch/services/executor
BenchmarkBareForkExec-2   	    1311	    821443 ns/op	         0.8020 p50-ms	    6526 B/op	      35 allocs/op
BenchmarkCommandRoundTrip-2   	     324	   3366851 ns/op	         2.725 p50-ms	   18489 B/op	     280 allocs/op
BenchmarkThroughput8Sandboxes-2   	       2	 734706388 ns/op	       544.4 cmds/s	 7454300 B/op	  111274 allocs/op
--- FAIL: BenchmarkIdleSandboxes
    bench_test.go:131: rpc error: code = ResourceExhausted desc = executor: sandbox limit reached
FAIL
exit status 1
FAIL	github.com/conch-sh/conch/services/executor	12.345s
pkg: github.com/conch-sh/conch/services/executor/sandbox
BenchmarkSandboxCreate-2   	    1610	    784192 ns/op	         0.6100 p50-ms	    4594 B/op	      79 allocs/op
BenchmarkTwoShells-2   	     669	   1915076 ns/op	         1.881 p50-ms	    6580 B/op	      35 allocs/op
PASS
ok  	github.com/conch-sh/conch/services/executor/sandbox	33.541s
pkg: github.com/conch-sh/conch/services/workspace/files
BenchmarkHydrate/s3/cold-service-2         	       1	2323253281 ns/op	54492600 B/op	  619596 allocs/op
BenchmarkHydrate/s3/unchanged-2            	     316	   3236697 ns/op	  973452 B/op	   11320 allocs/op
PASS
ok  	github.com/conch-sh/conch/services/workspace/files	93.655s
`

func ptr(v float64) *float64 { return &v }

func TestEvaluate(t *testing.T) {
	t.Parallel()
	out, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	bwrap := &Anchor{Name: "bare bwrap", Ref: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkBareBwrap", Unit: "p50-ms"}}
	forkExec := &Anchor{Name: "fork+exec", Ref: Ref{Pkg: "executor", Bench: "BenchmarkBareForkExec", Unit: "p50-ms"}}
	tests := []struct {
		name string
		row  Row
		want Line
	}{
		{
			name: "absolute target met, ratio target missed",
			row:  Row{Metric: "round trip", Unit: "ms", Value: Ref{Pkg: "executor", Bench: "BenchmarkCommandRoundTrip", Unit: "p50-ms"}, Anchor: forkExec, Target: Target{Max: 3, MaxRatio: 2}},
			want: Line{Metric: "round trip", Unit: "ms", Value: ptr(2.725), Anchor: "fork+exec", AnchorValue: ptr(0.802), Ratio: ptr(2.725 / 0.802), Target: &Target{Max: 3, MaxRatio: 2}, Status: Fail},
		},
		{
			name: "both targets met",
			row:  Row{Metric: "round trip", Unit: "ms", Value: Ref{Pkg: "executor", Bench: "BenchmarkCommandRoundTrip", Unit: "p50-ms"}, Anchor: forkExec, Target: Target{Max: 3, MaxRatio: 4}},
			want: Line{Metric: "round trip", Unit: "ms", Value: ptr(2.725), Anchor: "fork+exec", AnchorValue: ptr(0.802), Ratio: ptr(2.725 / 0.802), Target: &Target{Max: 3, MaxRatio: 4}, Status: Pass},
		},
		{
			name: "minimum met",
			row:  Row{Metric: "throughput", Unit: "cmds/s", Value: Ref{Pkg: "executor", Bench: "BenchmarkThroughput8Sandboxes", Unit: "cmds/s"}, Target: Target{Min: 300}},
			want: Line{Metric: "throughput", Unit: "cmds/s", Value: ptr(544.4), Target: &Target{Min: 300}, Status: Pass},
		},
		{
			name: "ns/op as a rate",
			row:  Row{Metric: "evaluate", Unit: "op/s", Value: Ref{Pkg: "approval/policy", Bench: "BenchmarkEvaluate", Unit: "ns/op"}, Target: Target{Min: 50_000}},
			want: Line{Metric: "evaluate", Unit: "op/s", Value: ptr(1e9 / 11526), Target: &Target{Min: 50_000}, Status: Pass},
		},
		{
			name: "ns/op in ms over the maximum",
			row:  Row{Metric: "hydrate", Unit: "ms", Value: Ref{Pkg: "workspace/files", Bench: "BenchmarkHydrate/s3/cold-service", Unit: "ns/op"}, Target: Target{Max: 1000}},
			want: Line{Metric: "hydrate", Unit: "ms", Value: ptr(2323.253281), Target: &Target{Max: 1000}, Status: Fail},
		},
		{
			name: "no target",
			row:  Row{Metric: "agent", Unit: "ms", Value: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkSandboxCreate", Unit: "p50-ms"}, Anchor: &Anchor{Name: "shells", Ref: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkTwoShells", Unit: "p50-ms"}}},
			want: Line{Metric: "agent", Unit: "ms", Value: ptr(0.61), Anchor: "shells", AnchorValue: ptr(1.881), Ratio: ptr(0.61 / 1.881), Status: Info},
		},
		{
			name: "benchmark that did not run",
			row:  Row{Metric: "upload", Unit: "MB/s", Value: Ref{Pkg: "e2e", Bench: "BenchmarkFilesTransfer/upload", Unit: "MB/s"}, Target: Target{Min: 100}},
			want: Line{Metric: "upload", Unit: "MB/s", Target: &Target{Min: 100}, Status: Skipped},
		},
		{
			name: "sub-benchmark that did not run",
			row:  Row{Metric: "hydrate", Unit: "ms", Value: Ref{Pkg: "workspace/files", Bench: "BenchmarkHydrate/s3/cold", Unit: "ns/op"}, Target: Target{Max: 1000}},
			want: Line{Metric: "hydrate", Unit: "ms", Target: &Target{Max: 1000}, Status: Skipped},
		},
		{
			name: "benchmark that failed",
			row:  Row{Metric: "idle", Unit: "MiB", Value: Ref{Pkg: "executor", Bench: "BenchmarkIdleSandboxes", Unit: "MiB-rss/sandbox"}, Target: Target{Max: 5}},
			want: Line{Metric: "idle", Unit: "MiB", Target: &Target{Max: 5}, Status: Error},
		},
		{
			name: "a metric the benchmark does not report",
			row:  Row{Metric: "create", Unit: "ms", Value: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkSandboxCreate", Unit: "p99-ms"}},
			want: Line{Metric: "create", Unit: "ms", Status: Skipped},
		},
		{
			name: "ratio target without its anchor",
			row:  Row{Metric: "create", Unit: "ms", Value: Ref{Pkg: "executor/sandbox", Bench: "BenchmarkSandboxCreate", Unit: "p50-ms"}, Anchor: bwrap, Target: Target{MaxRatio: 1.5}},
			want: Line{Metric: "create", Unit: "ms", Value: ptr(0.61), Anchor: "bare bwrap", Target: &Target{MaxRatio: 1.5}, Status: Skipped},
		},
		{
			name: "package named by its last path elements",
			row:  Row{Metric: "x", Unit: "ms", Value: Ref{Pkg: "sandbox", Bench: "BenchmarkSandboxCreate", Unit: "p50-ms"}},
			want: Line{Metric: "x", Unit: "ms", Value: ptr(0.61), Status: Info},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep, err := Evaluate(out, []Row{tt.row})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]Line{tt.want}, rep.Lines); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvaluateRejectsUnknownUnit(t *testing.T) {
	t.Parallel()
	row := Row{Metric: "x", Unit: "MB/s", Value: Ref{Pkg: "approval/policy", Bench: "BenchmarkEvaluate", Unit: "ns/op"}}
	if _, err := Evaluate(&Output{}, []Row{row}); err == nil {
		t.Fatal("Evaluate accepted ns/op shown as MB/s")
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	rep := &Report{Lines: []Line{
		{Service: "executor", Metric: "round trip", Unit: "ms", Value: ptr(2.725), Anchor: "fork+exec", AnchorValue: ptr(0.802), Ratio: ptr(3.398), Target: &Target{Max: 3, MaxRatio: 2}, Status: Fail},
		{Service: "approval", Metric: "evaluate", Unit: "op/s", Value: ptr(86760.4), Target: &Target{Min: 50_000}, Status: Pass},
		{Service: "workspace", Metric: "upload", Unit: "MB/s", Anchor: "direct put", Target: &Target{Min: 100}, Status: Skipped},
		{Service: "router", Metric: "overhead", Unit: "ms", Value: ptr(0.343), Status: Info},
	}}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := `service    metric      value       anchor (same run)    ratio  target        result
executor   round trip  2.73 ms     fork+exec: 0.802 ms  3.40×  ≤ 3 ms, ≤ 2×  FAIL
approval   evaluate    86760 op/s                              ≥ 50000 op/s  pass
workspace  upload      —           direct put: —               ≥ 100 MB/s    skipped
router     overhead    0.343 ms                                              info

targets: 1 met, 1 missed; 1 skipped, 0 errors
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestRowsNameRealBenchmarks keeps the report in step with the benchmarks:
// a renamed benchmark would otherwise turn its row into "skipped" for
// good.
func TestRowsNameRealBenchmarks(t *testing.T) {
	t.Parallel()
	if _, err := Evaluate(&Output{}, Rows); err != nil {
		t.Fatal(err)
	}
	services := filepath.Join("..", "..")
	for _, row := range Rows {
		refs := []Ref{row.Value}
		if row.Anchor != nil {
			refs = append(refs, row.Anchor.Ref)
		}
		for _, ref := range refs {
			top, _, _ := strings.Cut(ref.Bench, "/")
			files, err := filepath.Glob(filepath.Join(services, ref.Pkg, "*_test.go"))
			if err != nil {
				t.Fatal(err)
			}
			var src strings.Builder
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				src.Write(b)
			}
			if !regexp.MustCompile(`(?m)^func ` + top + `\(b \*testing\.B\)`).MatchString(src.String()) {
				t.Errorf("row %q: no %s in %s", row.Metric, top, ref.Pkg)
			}
			allocs := (ref.Unit == "B/op" || ref.Unit == "allocs/op") && strings.Contains(src.String(), "b.ReportAllocs()")
			if ref.Unit != "ns/op" && ref.Unit != "MB/s" && !allocs && !strings.Contains(src.String(), `"`+ref.Unit+`"`) {
				t.Errorf("row %q: %s does not report %s", row.Metric, ref.Bench, ref.Unit)
			}
		}
	}
}

func TestNumber(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v    float64
		want string
	}{
		{0.0555, "0.056"},
		{1, "1.00"},
		{2.725, "2.73"},
		{17.71, "17.7"},
		{355.9, "356"},
		{86760.4, "86760"},
		{-0.25, "-0.250"},
	}
	for _, tt := range tests {
		if got := number(tt.v); got != tt.want {
			t.Errorf("number(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

func TestTargetText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		target *Target
		unit   string
		want   string
	}{
		{nil, "ms", ""},
		{&Target{MaxRatio: 1.5}, "ms", "≤ 1.5×"},
		{&Target{Max: 3, MaxRatio: 2}, "ms", "≤ 3 ms, ≤ 2×"},
		{&Target{Min: 50_000}, "op/s", "≥ 50000 op/s"},
		{&Target{Max: 0.25}, "MiB", "≤ 0.25 MiB"},
	}
	for _, tt := range tests {
		if got := (Line{Unit: tt.unit, Target: tt.target}).targetText(); got != tt.want {
			t.Errorf("%+v in %s = %q, want %q", tt.target, tt.unit, got, tt.want)
		}
	}
}
