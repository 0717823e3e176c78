package files

import (
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

const (
	// MaxPathLen is the longest workspace path, in bytes, as Linux's PATH_MAX.
	MaxPathLen = 4096
	// MaxNameLen is the longest path component, in bytes: Linux's NAME_MAX,
	// so that every name a sandbox can create is one the stores hold.
	MaxNameLen = 255
	// MaxLinkLen is the longest symlink target kept.
	MaxLinkLen = 2048
)

// lookalikes are characters that some layer (a client, a terminal, an
// archive tool, a normalising file system) may read as '.', '/' or '\'.
// Paths holding them are refused rather than stored under a name that
// looks like a traversal.
var lookalikes = map[rune]bool{
	'\\': true, '\u2024': true, '\u2025': true, '\u2026': true, '\uFE52': true, '\uFF0E': true,
	'\u3002': true, '\uFF61': true, '\u2215': true, '\u2044': true, '\u29F8': true, '\uFF0F': true,
	'\u2571': true, '\u29F5': true, '\u29F9': true, '\uFE68': true, '\uFF3C': true, '\u2216': true,
	'\u00B7': true, '\u0701': true, '\u0702': true, '\uA60E': true, '\u0660': true, '\u06D4': true,
}

// CleanPath checks a workspace-absolute path and returns it in canonical
// form ("/" or "/a/b", no trailing slash, "//" and "." segments removed).
// Anything that could leave the workspace, or be read as doing so after one
// more decoding, is an InvalidArgument error naming field.
//
// Every other name Linux and S3 can both hold is accepted: any UTF-8
// component of up to 255 bytes. The refusals are each a spelling of
// traversal or a name shown as something it is not: "..", separators and
// their look-alikes, percent-encodings that decode to either, control and
// invisible characters, and components that read as "." or ".." once their
// spaces are trimmed (".. ", " . ", as clients, archive tools and Windows
// do). A component of three or more dots ("...") is kept: no URL, POSIX or
// S3 rule reads it as a dot segment, and trimming never makes it one.
func CleanPath(field, p string) (string, error) {
	bad := func(why string) error {
		return errs.New(errs.InvalidArgument, "%s: %s", field, why)
	}
	switch {
	case p == "":
		return "", bad("required; a workspace-absolute path such as /notes/a.txt")
	case len(p) > MaxPathLen:
		return "", bad("longer than 4096 bytes")
	case !utf8.ValidString(p):
		return "", bad("not valid UTF-8")
	case p[0] != '/':
		return "", bad("must start with / (workspace-absolute)")
	}
	for _, r := range p {
		switch {
		case r == 0:
			return "", bad("contains a NUL byte")
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r):
			return "", bad("contains a control character")
		case lookalikes[r]:
			return "", bad("contains " + quoteRune(r) + ", which reads like a path separator or dot")
		case r == '\uFEFF' || unicode.Is(unicode.Cf, r):
			return "", bad("contains an invisible formatting character")
		}
	}
	segs := make([]string, 0, strings.Count(p, "/"))
	for seg := range strings.SplitSeq(p, "/") {
		switch {
		case seg == "" || seg == ".":
			continue
		case seg == "..":
			return "", bad(`".." is not allowed`)
		case len(seg) > MaxNameLen:
			return "", bad(fmt.Sprintf("a path component is longer than %d bytes", MaxNameLen))
		case decodesToTraversal(seg):
			return "", bad("a path component decodes to a traversal (encoded '.', '/' or '\\')")
		case readsAsDotSegment(seg):
			return "", bad(`a path component of only spaces, or one that reads as "." or ".." without its spaces, is not allowed`)
		}
		segs = append(segs, seg)
	}
	return "/" + strings.Join(segs, "/"), nil
}

// readsAsDotSegment reports whether seg is blank, or is "." or ".." once
// its white space is dropped: a client that trims names would write it
// somewhere else than the workspace shows.
func readsAsDotSegment(seg string) bool {
	if !strings.ContainsFunc(seg, unicode.IsSpace) {
		return false
	}
	rest := strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, seg)
	return rest == "" || rest == "." || rest == ".."
}

// decodesToTraversal reports whether percent-decoding seg (up to three
// times) yields "..", "." or a separator.
func decodesToTraversal(seg string) bool {
	cur := seg
	for range 3 {
		if !strings.Contains(cur, "%") {
			return false
		}
		next, err := url.PathUnescape(cur)
		if err != nil || next == cur {
			return false
		}
		if next == "." || next == ".." || strings.ContainsAny(next, "/\\\x00") {
			return true
		}
		cur = next
	}
	return false
}

func quoteRune(r rune) string {
	return fmt.Sprintf("%U", r)
}

// ancestors returns the ancestors of a clean path, outermost first,
// without "/" and without p itself.
func ancestors(p string) []string {
	var out []string
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// base returns the last component of a clean path ("" for "/").
func base(p string) string {
	return p[strings.LastIndexByte(p, '/')+1:]
}
