package executor

import (
	"fmt"
	"strings"
	"testing"
)

func TestCheckLabels(t *testing.T) {
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[fmt.Sprint("k", i)] = ""
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"none", nil, ""},
		{"plain", map[string]string{"team": "infra", "app.kubernetes.io/name": "web", "x": ""}, ""},
		{"longest key", map[string]string{strings.Repeat("k", 63): "v"}, ""},
		{"longest value", map[string]string{"k": strings.Repeat("é", MaxLabelValueChars)}, ""},
		{"too many", many, "labels: at most 32 labels, got 33"},
		{"empty key", map[string]string{"": "v"}, `labels: key "" must be`},
		{"long key", map[string]string{strings.Repeat("k", 64): "v"}, "labels: key"},
		{"key ends with a dot", map[string]string{"a.": "v"}, `labels: key "a." must be`},
		{"key with =", map[string]string{"a=b": "v"}, `labels: key "a=b" must be`},
		{"key with a control", map[string]string{"a\x1bb": "v"}, `labels: key "a\x1bb" must be`},
		{"key out of ASCII", map[string]string{"é": "v"}, `labels: key "é" must be`},
		{"long value", map[string]string{"k": strings.Repeat("v", MaxLabelValueChars+1)}, "labels[k]: at most 256 characters, got 257"},
		{"value with a newline", map[string]string{"k": "a\nb"}, "labels[k]: must be UTF-8 without control characters"},
		{"value not UTF-8", map[string]string{"k": "\xff"}, "labels[k]: must be UTF-8 without control characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkLabels("labels", tc.labels)
			if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(got, tc.want)) {
				t.Errorf("checkLabels(%q) = %v, want %q", tc.labels, err, tc.want)
			}
		})
	}
}

func TestLabelSelector(t *testing.T) {
	labels := map[string]string{"team": "infra", "tier": "", "env": "a=b"}
	for _, tc := range []struct {
		terms []string
		match bool
		err   string
	}{
		{nil, true, ""},
		{[]string{"team=infra"}, true, ""},
		{[]string{"team"}, true, ""},
		{[]string{"tier="}, true, ""},
		{[]string{"tier"}, true, ""},
		{[]string{"team=infra", "tier"}, true, ""},
		{[]string{"env=a=b"}, true, ""},
		{[]string{"team=web"}, false, ""},
		{[]string{"team="}, false, ""},
		{[]string{"owner"}, false, ""},
		{[]string{"team=infra", "owner"}, false, ""},
		{[]string{"=infra"}, false, `label: key "" must be`},
		{[]string{"team=a\tb"}, false, "label[team]: must be UTF-8"},
	} {
		sel, err := parseSelector("label", tc.terms)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseSelector(%q) = %v, want %q", tc.terms, err, tc.err)
			}
		case err != nil:
			t.Errorf("parseSelector(%q): %v", tc.terms, err)
		case sel.matches(labels) != tc.match:
			t.Errorf("%q matches %v = %v, want %v", tc.terms, labels, !tc.match, tc.match)
		}
	}
}
