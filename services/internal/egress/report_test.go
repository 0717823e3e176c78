package egress

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// TestReport checks that a report keeps every allowed connection up to
// its bound whatever came before it, the first of the others, and counts
// exactly what it leaves out.
func TestReport(t *testing.T) {
	t.Parallel()
	// run adds n connections named prefix0, prefix1, …
	type run struct {
		prefix  string
		n       int
		allowed bool
	}
	names := func(prefix string, from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("%s%d", prefix, i))
		}
		return out
	}
	cases := []struct {
		name    string
		runs    []run
		omit    int
		kept    []string
		omitted int
	}{
		{name: "empty"},
		{name: "a few of each", runs: []run{{"r", 2, false}, {"a", 1, true}, {"r", 1, false}},
			kept: []string{"r0", "r1", "a0", "r0"}},
		{name: "a delivery after 70 refusals", runs: []run{{"r", 70, false}, {"a", 1, true}},
			kept: append(names("r", 0, MaxOtherReported), "a0"), omitted: 70 - MaxOtherReported},
		{name: "refusals after the deliveries' bound", runs: []run{{"a", MaxAllowedReported + 3, true}, {"r", 2, false}},
			kept: append(names("a", 0, MaxAllowedReported), "r0", "r1"), omitted: 3},
		{name: "both bounds", runs: []run{{"r", MaxOtherReported + 5, false}, {"a", MaxAllowedReported + 7, true}},
			kept: append(names("r", 0, MaxOtherReported), names("a", 0, MaxAllowedReported)...), omitted: 12},
		{name: "left out earlier", runs: []run{{"a", 1, true}}, omit: 9, kept: []string{"a0"}, omitted: 9},
		{name: "a negative count is none", omit: -4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var r Report[string]
			for _, x := range c.runs {
				for i := range x.n {
					r.Add(fmt.Sprintf("%s%d", x.prefix, i), x.allowed)
				}
			}
			r.Omit(c.omit)
			if diff := cmp.Diff(c.kept, r.Kept()); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if r.Omitted() != c.omitted {
				t.Errorf("omitted %d, want %d", r.Omitted(), c.omitted)
			}
		})
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"a longer one", 8, "a lon…"},
		{"ééééé", 7, "éé…"},
		{"ééééé", 8, "éé…"},
		{"abc", 2, ""},
		{strings.Repeat("x", 1<<20), MaxHostReported, strings.Repeat("x", MaxHostReported-3) + "…"},
	}
	for _, c := range cases {
		got := Clip(c.in, c.n)
		if got != c.want || len(got) > c.n || !utf8.ValidString(got) {
			t.Errorf("Clip(%.20q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
