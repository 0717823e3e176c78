package files

import (
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

func TestCleanPath(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		"/":                                   "/",
		"/a.txt":                              "/a.txt",
		"/notes/a.txt":                        "/notes/a.txt",
		"//notes//a.txt/":                     "/notes/a.txt",
		"/./a/./b":                            "/a/b",
		"/a b/ü.txt":                          "/a b/ü.txt",
		"/100%25":                             "/100%25",
		"/.hidden":                            "/.hidden",
		"/a..b":                               "/a..b",
		"/..a":                                "/..a",
		"/" + strings.Repeat("n", MaxNameLen): "/" + strings.Repeat("n", MaxNameLen),
	}
	for in, want := range good {
		got, err := CleanPath("path", in)
		if err != nil || got != want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{
		"", "a.txt", "notes/a", ".", "..", "../etc/passwd", "/..", "/../etc/passwd", "/a/../../b",
		"/a/..", "/a/../b", "/%2e%2e/etc", "/%2E%2E", "/%252e%252e/x", "/%25252e%25252e", "/a%2fb/..%2f..",
		"/%2e%2e%2f", "/..%5c..%5cwindows", "/a\\..\\b", "\\..\\b", "/a\x00b", "/a%00b/x",
		"/\u2024\u2024/x", "/\uff0e\uff0e/x", "/a\u2215b", "/a\uff0fb", "/\u2025", "/a\u2044b",
		"/...", "/. .", "/a/ ..", "/line\nbreak", "/tab\tx", "/bidi\u202ex", "/zw\u200bj", "/bom\ufeff",
		"/" + strings.Repeat("n", MaxNameLen+1), "/" + strings.Repeat("a/", MaxPathLen/2+1), "/\xff\xfe",
		"C:\\Windows", "~/x", "file:///etc/passwd",
	}
	for _, in := range bad {
		_, err := CleanPath("path", in)
		if errs.KindOf(err) != errs.InvalidArgument || !strings.HasPrefix(err.Error(), "path: ") {
			t.Errorf("CleanPath(%q) = %v, want an InvalidArgument naming the field", in, err)
		}
	}
}
