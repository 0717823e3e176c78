package executor

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/conch-sh/conch/services/internal/display"
	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// Bounds of a sandbox's labels: a tenant sets them, the executor holds
// them in memory and every list of the account reads them.
const (
	MaxLabels          = 32
	MaxLabelValueChars = 256
)

// labelKey is the shape of a label's key: 1-63 characters, the separators
// only inside.
var labelKey = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$`)

const labelKeyRule = "1-63 characters of [A-Za-z0-9._/-], starting and ending with a letter or digit"

// checkLabels is the one check of the labels a sandbox is created with.
func checkLabels(field string, m map[string]string) error {
	if len(m) > MaxLabels {
		return errs.New(errs.InvalidArgument, "%s: at most %d labels, got %d", field, MaxLabels, len(m))
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := checkLabel(field, k, m[k]); err != nil {
			return err
		}
	}
	return nil
}

func checkLabel(field, k, v string) error {
	if !labelKey.MatchString(k) {
		return errs.New(errs.InvalidArgument, "%s: key \"%s\" must be %s", field, shown(k), labelKeyRule)
	}
	if n := utf8.RuneCountInString(v); n > MaxLabelValueChars {
		return errs.New(errs.InvalidArgument, "%s[%s]: at most %d characters, got %d", field, k, MaxLabelValueChars, n)
	}
	if !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
		return errs.New(errs.InvalidArgument, "%s[%s]: must be UTF-8 without control characters", field, k)
	}
	return nil
}

// shown is a tenant's text fit to quote in an error: escaped and cut.
func shown(s string) string {
	const most = 80
	if len(s) > most {
		s = s[:most] + "…"
	}
	return display.Escape(s)
}

// labelSelector is what a list asks of labels: every term must hold.
type labelSelector []labelTerm

// labelTerm is "key=value" (that value) or "key" (any value).
type labelTerm struct {
	key, value string
	anyValue   bool
}

// parseSelector reads a list's label parameters, each checked as a label.
func parseSelector(field string, terms []string) (labelSelector, error) {
	if len(terms) > MaxLabels {
		return nil, errs.New(errs.InvalidArgument, "%s: at most %d terms, got %d", field, MaxLabels, len(terms))
	}
	sel := make(labelSelector, 0, len(terms))
	for _, t := range terms {
		k, v, hasValue := strings.Cut(t, "=")
		if err := checkLabel(field, k, v); err != nil {
			return nil, err
		}
		sel = append(sel, labelTerm{key: k, value: v, anyValue: !hasValue})
	}
	return sel, nil
}

// matches reports whether labels satisfy every term.
func (sel labelSelector) matches(labels map[string]string) bool {
	for _, t := range sel {
		v, ok := labels[t.key]
		if !ok || !t.anyValue && v != t.value {
			return false
		}
	}
	return true
}
