package benchreport

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		in          string
		results     []Result
		failed      []benchKey
		failedPkgs  []string
		wantConfigs map[string]string
	}{
		{
			name: "standard metrics",
			in: `goos: linux
goarch: amd64
pkg: github.com/conch-sh/conch/services/approval/policy
cpu: Intel(R) Xeon(R) Processor
BenchmarkEvaluate-2                	  100516	     11526 ns/op	    4857 B/op	      49 allocs/op
PASS
ok  	github.com/conch-sh/conch/services/approval/policy	2.316s
`,
			results: []Result{{Pkg: "github.com/conch-sh/conch/services/approval/policy", Name: "BenchmarkEvaluate", Iterations: 100516,
				Metrics: map[string]float64{"ns/op": 11526, "B/op": 4857, "allocs/op": 49}}},
			wantConfigs: map[string]string{"goos": "linux", "goarch": "amd64", "cpu": "Intel(R) Xeon(R) Processor"},
		},
		{
			name: "custom metrics and sub-benchmarks of two packages",
			in: `pkg: github.com/conch-sh/conch/services/executor
BenchmarkIdleSandboxes-2   	       1	5709364227 ns/op	         0.08273 MiB-rss/sandbox	         6.840 MiB-sandbox-procs-pss/sandbox	32622168 B/op	  171568 allocs/op
pkg: github.com/conch-sh/conch/services/e2e
BenchmarkFilesTransfer/upload-2         	       2	 762496426 ns/op	 131.15 MB/s	        23.27 rss-growth-MiB	   71676 B/op	      73 allocs/op
`,
			results: []Result{
				{Pkg: "github.com/conch-sh/conch/services/executor", Name: "BenchmarkIdleSandboxes", Iterations: 1,
					Metrics: map[string]float64{"ns/op": 5709364227, "MiB-rss/sandbox": 0.08273, "MiB-sandbox-procs-pss/sandbox": 6.840, "B/op": 32622168, "allocs/op": 171568}},
				{Pkg: "github.com/conch-sh/conch/services/e2e", Name: "BenchmarkFilesTransfer/upload", Iterations: 2,
					Metrics: map[string]float64{"ns/op": 762496426, "MB/s": 131.15, "rss-growth-MiB": 23.27, "B/op": 71676, "allocs/op": 73}},
			},
			wantConfigs: map[string]string{},
		},
		{
			name: "GOMAXPROCS 1 has no suffix",
			in: `pkg: github.com/conch-sh/conch/services/approval/policy
BenchmarkEvaluate     	  107040	     11681 ns/op	    4858 B/op	      49 allocs/op
`,
			results: []Result{{Pkg: "github.com/conch-sh/conch/services/approval/policy", Name: "BenchmarkEvaluate", Iterations: 107040,
				Metrics: map[string]float64{"ns/op": 11681, "B/op": 4858, "allocs/op": 49}}},
			wantConfigs: map[string]string{},
		},
		{
			name: "output printed between a name and its results",
			in: `pkg: example.com/x
BenchmarkCompletionOverhead-2   	time=2026-11-30T03:40:00Z level=WARN msg="upstream slow"
    1783	    635980 ns/op	         0.4500 conch-p50-ms
`,
			results: []Result{{Pkg: "example.com/x", Name: "BenchmarkCompletionOverhead", Iterations: 1783,
				Metrics: map[string]float64{"ns/op": 635980, "conch-p50-ms": 0.45}}},
			wantConfigs: map[string]string{},
		},
		{
			name: "failures",
			in: `pkg: example.com/bfmt
BenchmarkOK-2       	     100	         9.050 ns/op	       0 B/op	       0 allocs/op
--- FAIL: BenchmarkFails
    b_test.go:12: boom
BenchmarkSub/a-2    	     100	        10.83 ns/op	       0 B/op	       0 allocs/op
--- FAIL: BenchmarkSub/bad
    b_test.go:25: sub boom
--- FAIL: BenchmarkSub
FAIL
exit status 1
FAIL	example.com/bfmt	0.034s
# example.com/broken
broken/x_test.go:3:1: syntax error: non-declaration statement outside function body
FAIL	example.com/broken [build failed]
FAIL
`,
			results: []Result{
				{Pkg: "example.com/bfmt", Name: "BenchmarkOK", Iterations: 100, Metrics: map[string]float64{"ns/op": 9.05, "B/op": 0, "allocs/op": 0}},
				{Pkg: "example.com/bfmt", Name: "BenchmarkSub/a", Iterations: 100, Metrics: map[string]float64{"ns/op": 10.83, "B/op": 0, "allocs/op": 0}},
			},
			failed:      []benchKey{{"example.com/bfmt", "BenchmarkFails"}, {"example.com/bfmt", "BenchmarkSub/bad"}, {"example.com/bfmt", "BenchmarkSub"}},
			failedPkgs:  []string{"example.com/bfmt", "example.com/broken"},
			wantConfigs: map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := Parse(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.results, out.Results, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("results (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantConfigs, out.Config); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			failed := map[benchKey]bool{}
			for _, k := range tt.failed {
				failed[k] = true
			}
			if diff := cmp.Diff(failed, out.failed, cmp.AllowUnexported(benchKey{})); diff != "" {
				t.Errorf("failed (-want +got):\n%s", diff)
			}
			failedPkgs := map[string]bool{}
			for _, p := range tt.failedPkgs {
				failedPkgs[p] = true
			}
			if diff := cmp.Diff(failedPkgs, out.failedPkgs); diff != "" {
				t.Errorf("failed packages (-want +got):\n%s", diff)
			}
		})
	}
}
