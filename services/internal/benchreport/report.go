package benchreport

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Ref names one metric of one benchmark.
type Ref struct {
	// Pkg is the package's path below the module, e.g. "executor/sandbox".
	Pkg string
	// Bench is the benchmark's name without the -GOMAXPROCS suffix.
	Bench string
	// Unit is the metric's unit as the benchmark reports it. Only "ns/op"
	// is converted to the row's unit; any other metric is in it already.
	Unit string
}

// Anchor is the floor a row is compared with, measured in the same run.
type Anchor struct {
	// Name says what the anchor measures, e.g. "bare fork+exec".
	Name string
	Ref
}

// Target is a goal from the issues; a zero field sets no goal.
type Target struct {
	// Max and Min bound the value, in the row's unit.
	Max float64 `json:"max,omitempty"`
	Min float64 `json:"min,omitempty"`
	// MaxRatio bounds value/anchor.
	MaxRatio float64 `json:"max_ratio,omitempty"`
}

func (t Target) isZero() bool { return t == Target{} }

// Row declares one line of the report.
type Row struct {
	Service string
	Metric  string
	// Unit is the unit the row shows its value, anchor and target in.
	Unit   string
	Value  Ref
	Anchor *Anchor
	Target Target
}

// Status is a line's verdict.
type Status string

// The verdicts: a target met or missed; a value with no target; no value
// because its benchmark did not run, or because it or its package failed.
const (
	Pass    Status = "pass"
	Fail    Status = "fail"
	Info    Status = "info"
	Skipped Status = "skipped"
	Error   Status = "error"
)

// Line is a row evaluated against one run's output.
type Line struct {
	Service     string   `json:"service"`
	Metric      string   `json:"metric"`
	Unit        string   `json:"unit"`
	Value       *float64 `json:"value"`
	Anchor      string   `json:"anchor,omitempty"`
	AnchorValue *float64 `json:"anchor_value,omitempty"`
	Ratio       *float64 `json:"ratio,omitempty"`
	Target      *Target  `json:"target,omitempty"`
	Status      Status   `json:"status"`
}

// Report is the evaluated rows and every benchmark result of the run.
type Report struct {
	Config     map[string]string `json:"config"`
	Lines      []Line            `json:"rows"`
	Benchmarks []Result          `json:"benchmarks"`
}

// Evaluate takes each row's value and anchor from out and judges it
// against its target. A row whose benchmark did not run is skipped, not
// failed.
func Evaluate(out *Output, rows []Row) (*Report, error) {
	for _, row := range rows {
		if err := row.check(); err != nil {
			return nil, err
		}
	}
	rep := &Report{Config: out.Config, Lines: make([]Line, 0, len(rows)), Benchmarks: out.Results}
	for _, row := range rows {
		l, err := evaluate(out, row)
		if err != nil {
			return nil, err
		}
		rep.Lines = append(rep.Lines, l)
	}
	return rep, nil
}

// check reports a row whose metrics cannot be shown in its unit.
func (row Row) check() error {
	refs := []Ref{row.Value}
	if row.Anchor != nil {
		refs = append(refs, row.Anchor.Ref)
	}
	for _, ref := range refs {
		if _, err := toUnit(1, ref.Unit, row.Unit); err != nil {
			return fmt.Errorf("benchreport: row %q: %w", row.Metric, err)
		}
	}
	return nil
}

func evaluate(out *Output, row Row) (Line, error) {
	l := Line{Service: row.Service, Metric: row.Metric, Unit: row.Unit}
	if !row.Target.isZero() {
		l.Target = &row.Target
	}
	v, ok, why := out.lookup(row.Value)
	if ok {
		var err error
		if v, err = toUnit(v, row.Value.Unit, row.Unit); err != nil {
			return Line{}, fmt.Errorf("benchreport: row %q: %w", row.Metric, err)
		}
		l.Value = &v
	}
	anchorWhy := Status("")
	if row.Anchor != nil {
		l.Anchor = row.Anchor.Name
		a, aok, awhy := out.lookup(row.Anchor.Ref)
		anchorWhy = awhy
		if aok {
			var err error
			if a, err = toUnit(a, row.Anchor.Unit, row.Unit); err != nil {
				return Line{}, fmt.Errorf("benchreport: row %q: anchor: %w", row.Metric, err)
			}
			l.AnchorValue = &a
			if ok && a > 0 {
				r := v / a
				l.Ratio = &r
			}
		}
	}
	switch t := row.Target; {
	case !ok:
		l.Status = why
	case t.isZero():
		l.Status = Info
	case t.MaxRatio > 0 && l.Ratio == nil:
		// The ratio cannot be judged without its anchor.
		l.Status = anchorWhy
		if l.Status == "" {
			l.Status = Error
		}
	case t.Max > 0 && v > t.Max, t.Min > 0 && v < t.Min, t.MaxRatio > 0 && *l.Ratio > t.MaxRatio:
		l.Status = Fail
	default:
		l.Status = Pass
	}
	return l, nil
}

// toUnit converts v, reported by a benchmark in unit from, to the row's
// unit to. Only ns/op converts; any other metric is in the row's unit
// already.
func toUnit(v float64, from, to string) (float64, error) {
	if from != "ns/op" || to == "ns" {
		return v, nil
	}
	switch to {
	case "µs":
		return v / 1e3, nil
	case "ms":
		return v / 1e6, nil
	case "s":
		return v / 1e9, nil
	case "op/s":
		if v <= 0 {
			return 0, fmt.Errorf("%v ns/op is no rate", v)
		}
		return 1e9 / v, nil
	}
	return 0, fmt.Errorf("cannot convert ns/op to %s", to)
}

// WriteTable prints the report as an aligned table, then a summary line.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "service\tmetric\tvalue\tanchor (same run)\tratio\ttarget\tresult")
	count := map[Status]int{}
	for _, l := range r.Lines {
		count[l.Status]++
		value, anchor, ratio := "—", "", ""
		if l.Value != nil {
			value = withUnit(*l.Value, l.Unit)
		}
		if l.Anchor != "" {
			anchor = l.Anchor + ": —"
			if l.AnchorValue != nil {
				anchor = l.Anchor + ": " + withUnit(*l.AnchorValue, l.Unit)
			}
		}
		if l.Ratio != nil {
			ratio = number(*l.Ratio) + "×"
		}
		result := string(l.Status)
		if l.Status == Fail {
			result = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Service, l.Metric, value, anchor, ratio, l.targetText(), result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\ntargets: %d met, %d missed; %d skipped, %d errors\n", count[Pass], count[Fail], count[Skipped], count[Error])
	return err
}

func (l Line) targetText() string {
	if l.Target == nil {
		return ""
	}
	var parts []string
	// Targets are written down, not measured: shown as given.
	goal := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	if l.Target.Max > 0 {
		parts = append(parts, "≤ "+goal(l.Target.Max)+" "+l.Unit)
	}
	if l.Target.Min > 0 {
		parts = append(parts, "≥ "+goal(l.Target.Min)+" "+l.Unit)
	}
	if l.Target.MaxRatio > 0 {
		parts = append(parts, "≤ "+goal(l.Target.MaxRatio)+"×")
	}
	return strings.Join(parts, ", ")
}

func withUnit(v float64, unit string) string { return number(v) + " " + unit }

// number prints a measured v with about three significant digits, and
// whole numbers from 100 up.
func number(v float64) string {
	prec := 0
	switch a := max(v, -v); {
	case a < 1:
		prec = 3
	case a < 10:
		prec = 2
	case a < 100:
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}
