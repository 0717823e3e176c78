package benchreport

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Result is one result line of a benchmark.
type Result struct {
	// Pkg is the import path of the benchmark's package.
	Pkg string `json:"pkg"`
	// Name is the benchmark's full name without the -GOMAXPROCS suffix,
	// e.g. "BenchmarkHydrate/s3/cold".
	Name       string `json:"name"`
	Iterations int64  `json:"iterations"`
	// Metrics maps each unit the line reports ("ns/op", "MB/s", "p50-ms")
	// to its value.
	Metrics map[string]float64 `json:"metrics"`
}

// Output is what one or more runs of `go test -bench` printed.
type Output struct {
	// Config holds the goos, goarch and cpu lines.
	Config  map[string]string
	Results []Result
	// failed holds the benchmarks that printed "--- FAIL", failedPkgs
	// the packages go test reported as FAIL.
	failed     map[benchKey]bool
	failedPkgs map[string]bool
}

type benchKey struct{ pkg, name string }

// procsSuffix is the -GOMAXPROCS suffix go test adds to a benchmark's
// name when GOMAXPROCS is not 1. A sub-benchmark whose own name ends in
// -<digits> is indistinguishable from it, as for every reader of this
// format.
var procsSuffix = regexp.MustCompile(`-\d+$`)

// Parse reads the text output of `go test -bench` (the format of
// golang.org/design/14313-benchmark-format), as printed for one or more
// packages. Lines that are not benchmark results, configuration or
// failures are ignored, so the output of tests and logs may be mixed in.
func Parse(r io.Reader) (*Output, error) {
	out := &Output{Config: map[string]string{}, failed: map[benchKey]bool{}, failedPkgs: map[string]bool{}}
	var pkg, pending string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if k, v, ok := strings.Cut(line, ": "); ok && (k == "pkg" || k == "goos" || k == "goarch" || k == "cpu") {
			if k == "pkg" {
				pkg = v
			} else {
				out.Config[k] = v
			}
			pending = ""
			continue
		}
		if _, name, ok := strings.Cut(line, "--- FAIL: "); ok {
			out.failed[benchKey{pkg, benchName(strings.TrimSpace(name))}] = true
			continue
		}
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "FAIL" {
			out.failedPkgs[fields[1]] = true
			continue
		}
		if len(fields) == 0 {
			continue
		}
		if strings.HasPrefix(fields[0], "Benchmark") {
			// A benchmark's name is printed before its timed runs, so
			// whatever it prints meanwhile may split the name from its
			// results.
			pending = ""
			if res, ok := parseResult(fields[1:]); ok {
				res.Pkg, res.Name = pkg, benchName(fields[0])
				out.Results = append(out.Results, res)
			} else {
				pending = fields[0]
			}
			continue
		}
		if pending != "" {
			if res, ok := parseResult(fields); ok {
				res.Pkg, res.Name = pkg, benchName(pending)
				out.Results = append(out.Results, res)
				pending = ""
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("benchreport: read benchmark output: %w", err)
	}
	return out, nil
}

// parseResult parses the fields after a benchmark's name: the iteration
// count, then value-unit pairs.
func parseResult(fields []string) (Result, bool) {
	if len(fields) < 3 || len(fields)%2 != 1 {
		return Result{}, false
	}
	n, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return Result{}, false
	}
	res := Result{Iterations: n, Metrics: map[string]float64{}}
	for i := 1; i < len(fields); i += 2 {
		v, err := strconv.ParseFloat(fields[i], 64)
		if err != nil {
			return Result{}, false
		}
		res.Metrics[fields[i+1]] = v
	}
	return res, true
}

func benchName(s string) string { return procsSuffix.ReplaceAllString(s, "") }

// lookup returns the value of ref's metric. When the benchmark ran more
// than once (-count), it is the median. When there is none, why says
// whether the benchmark or its package failed (Error) or it did not run
// (Skipped).
func (o *Output) lookup(ref Ref) (v float64, ok bool, why Status) {
	var vs []float64
	for _, r := range o.Results {
		if v, ok := r.Metrics[ref.Unit]; ok && r.Name == ref.Bench && pkgIs(r.Pkg, ref.Pkg) {
			vs = append(vs, v)
		}
	}
	if len(vs) > 0 {
		slices.Sort(vs)
		return vs[len(vs)/2], true, ""
	}
	for k := range o.failed {
		if pkgIs(k.pkg, ref.Pkg) && (k.name == ref.Bench || strings.HasPrefix(ref.Bench, k.name+"/")) {
			return 0, false, Error
		}
	}
	for p := range o.failedPkgs {
		if pkgIs(p, ref.Pkg) {
			return 0, false, Error
		}
	}
	return 0, false, Skipped
}

// pkgIs reports whether importPath is pkg, a path below the module.
func pkgIs(importPath, pkg string) bool {
	return importPath == pkg || strings.HasSuffix(importPath, "/"+pkg)
}
