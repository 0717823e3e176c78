package files

import (
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

func TestCleanPath(t *testing.T) {
	t.Parallel()
	name255 := strings.Repeat("n", MaxNameLen)
	// A 255-byte name of 2- and 3-byte characters, as a sandbox may write.
	wide255 := strings.Repeat("ü", 126) + strings.Repeat("€", 1)
	good := []struct{ name, in, want string }{
		{"root", "/", "/"},
		{"file", "/a.txt", "/a.txt"},
		{"nested", "/notes/a.txt", "/notes/a.txt"},
		{"double slashes and trailing slash", "//notes//a.txt/", "/notes/a.txt"},
		{"dot segments dropped", "/./a/./b", "/a/b"},
		{"space and non-ASCII", "/a b/ü.txt", "/a b/ü.txt"},
		{"percent that decodes to nothing special", "/100%25", "/100%25"},
		{"hidden file", "/.hidden", "/.hidden"},
		{"dots inside a name", "/a..b", "/a..b"},
		{"dots before a name", "/..a", "/..a"},
		{"trailing dot", "/a.", "/a."},
		{"trailing space", "/a ", "/a "},
		{"three dots", "/...", "/..."},
		{"four dots in a dir", "/..../x", "/..../x"},
		{"three dots and a space", "/... ", "/... "},
		{"255-byte component", "/" + name255, "/" + name255},
		{"255-byte multibyte component", "/d/" + wide255, "/d/" + wide255},
	}
	for _, tc := range good {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := CleanPath("path", tc.in)
			if err != nil || got != tc.want {
				t.Errorf("CleanPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
	bad := []struct{ name, in, reason string }{
		{"empty", "", "required"},
		{"relative", "a.txt", "must start with /"},
		{"relative nested", "notes/a", "must start with /"},
		{"dot", ".", "must start with /"},
		{"dot dot", "..", "must start with /"},
		{"relative traversal", "../etc/passwd", "must start with /"},
		{"root parent", "/..", `".."`},
		{"absolute traversal", "/../etc/passwd", `".."`},
		{"deep traversal", "/a/../../b", `".."`},
		{"trailing parent", "/a/..", `".."`},
		{"inner parent", "/a/../b", `".."`},
		{"encoded", "/%2e%2e/etc", "decodes to a traversal"},
		{"encoded upper case", "/%2E%2E", "decodes to a traversal"},
		{"double-encoded", "/%252e%252e/x", "decodes to a traversal"},
		{"triple-encoded", "/%25252e%25252e", "decodes to a traversal"},
		{"encoded slash", "/a%2fb/..%2f..", "decodes to a traversal"},
		{"encoded parent and slash", "/%2e%2e%2f", "decodes to a traversal"},
		{"encoded backslash", "/..%5c..%5cwindows", "decodes to a traversal"},
		{"backslash", "/a\\..\\b", "reads like a path separator"},
		{"leading backslash", "\\..\\b", "must start with /"},
		{"NUL", "/a\x00b", "NUL"},
		{"encoded NUL", "/a%00b/x", "decodes to a traversal"},
		{"one dot leader", "/\u2024\u2024/x", "reads like a path separator or dot"},
		{"fullwidth dots", "/\uff0e\uff0e/x", "reads like a path separator or dot"},
		{"division slash", "/a\u2215b", "reads like a path separator or dot"},
		{"fullwidth slash", "/a\uff0fb", "reads like a path separator or dot"},
		{"two dot leader", "/\u2025", "reads like a path separator or dot"},
		{"fraction slash", "/a\u2044b", "reads like a path separator or dot"},
		{"dot and space", "/. .", `reads as "." or ".."`},
		{"space before parent", "/a/ ..", `reads as "." or ".."`},
		{"space after parent", "/.. /x", `reads as "." or ".."`},
		{"no-break space in parent", "/.\u00a0.", `reads as "." or ".."`},
		{"ideographic space and dot", "/\u3000.", `reads as "." or ".."`},
		{"only spaces", "/   ", "only spaces"},
		{"newline", "/line\nbreak", "control character"},
		{"tab", "/tab\tx", "control character"},
		{"bidi override", "/bidi\u202ex", "control character"},
		{"zero-width space", "/zw\u200bj", "invisible formatting character"},
		{"byte order mark", "/bom\ufeff", "invisible formatting character"},
		{"256-byte component", "/" + name255 + "n", "longer than 255 bytes"},
		{"over PATH_MAX", "/" + strings.Repeat("a/", MaxPathLen/2+1), "longer than 4096 bytes"},
		{"not UTF-8", "/\xff\xfe", "not valid UTF-8"},
		{"not UTF-8 in a long name", "/" + strings.Repeat("n", 200) + "\xff", "not valid UTF-8"},
		{"drive letter", "C:\\Windows", "must start with /"},
		{"home", "~/x", "must start with /"},
		{"URL", "file:///etc/passwd", "must start with /"},
	}
	for _, tc := range bad {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := CleanPath("path", tc.in)
			if errs.KindOf(err) != errs.InvalidArgument || !strings.HasPrefix(err.Error(), "path: ") || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("CleanPath(%q) = %v, want an InvalidArgument naming the field and saying %q", tc.in, err, tc.reason)
			}
		})
	}
}
