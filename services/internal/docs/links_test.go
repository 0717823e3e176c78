// Package docs checks the repository's Markdown documentation: the README
// and everything under docs/.
package docs

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, seen from this package.
const root = "../../.."

// markdownFiles are the documents checked: README.md, every Markdown file
// under docs/ and under deploy/.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	for _, dir := range []string{"docs", "deploy"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(p, ".md") {
				rel, err := filepath.Rel(root, p)
				if err != nil {
					return err
				}
				files = append(files, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// TestLinks: every relative link of the documentation names a file or
// directory of the repository, and every #anchor a heading of its target
// (or of the same document), as GitHub renders them.
func TestLinks(t *testing.T) {
	t.Parallel()
	anchors := map[string]map[string]bool{}
	anchorsOf := func(doc string) map[string]bool {
		if a, ok := anchors[doc]; ok {
			return a
		}
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(b))
		anchors[doc] = a
		return a
	}
	files := markdownFiles(t)
	if len(files) < 10 {
		t.Fatalf("found only %v: is root the repository?", files)
	}
	for _, doc := range files {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(b)) {
			target, anchor, _ := strings.Cut(l.target, "#")
			file := doc
			if target != "" {
				file = filepath.ToSlash(filepath.Join(filepath.Dir(doc), target))
				if strings.HasPrefix(file, "../") {
					t.Errorf("%s:%d: %s leaves the repository", doc, l.line, l.target)
					continue
				}
				info, err := os.Stat(filepath.Join(root, file))
				if err != nil {
					t.Errorf("%s:%d: %s: no such file %s", doc, l.line, l.target, file)
					continue
				}
				if info.IsDir() {
					if anchor != "" {
						t.Errorf("%s:%d: %s: an anchor in a directory", doc, l.line, l.target)
					}
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			if !anchorsOf(file)[anchor] {
				t.Errorf("%s:%d: %s: %s has no heading #%s", doc, l.line, l.target, file, anchor)
			}
		}
	}
}

// TestLinkCheckerFails holds the checker to what it must refuse: a link to
// a missing file and one to a missing heading are found, and a link
// inside code is not a link.
func TestLinkCheckerFails(t *testing.T) {
	t.Parallel()
	doc := "# Title\n\nSee [a](missing.md) and [b](#nowhere) and [c](#title).\n\n" +
		"```\n[d](in-fence.md)\n```\n\n    [e](indented.md)\n\n`[f](in-span.md)`\n"
	var got []string
	for _, l := range links(doc) {
		got = append(got, l.target)
	}
	if want := []string{"missing.md", "#nowhere", "#title"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("links = %q, want %q", got, want)
	}
	a := headingAnchors(doc)
	if !a["title"] || a["nowhere"] {
		t.Errorf("anchors = %v", a)
	}
}

func TestAnchor(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Compose, on one host":               "compose-on-one-host",
		"The `conch` object":                 "the-conch-object",
		"etcd's space":                       "etcds-space",
		"Streaming and `conch_event` chunks": "streaming-and-conch_event-chunks",
		"Updating: PUT and PATCH":            "updating-put-and-patch",
		"How-to guides: a task at a time":    "how-to-guides-a-task-at-a-time",
		"What runs is what was judged.":      "what-runs-is-what-was-judged",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
	a := headingAnchors("# A\n## A\n## A\n")
	for _, want := range []string{"a", "a-1", "a-2"} {
		if !a[want] {
			t.Errorf("repeated headings: no #%s in %v", want, a)
		}
	}
}

// link is one link of a document.
type link struct {
	target string
	line   int
}

var (
	// inlineLink is [text](target) or ![alt](target), with an optional
	// title after the target.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	anchorID   = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// links returns the relative links of a Markdown document, outside code
// blocks and code spans; links with a scheme (https:, mailto:) are left
// out.
func links(doc string) []link {
	var out []link
	eachProseLine(doc, func(n int, line string) {
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			target := strings.Trim(m[1], "<>")
			if scheme.MatchString(target) {
				continue
			}
			out = append(out, link{target: target, line: n})
		}
	})
	return out
}

// headingAnchors returns the anchors GitHub gives a document's headings
// (a repeated one gets -1, -2, … after the first), and those of explicit
// <a id> or <a name> tags.
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	eachProseLine(doc, func(_ int, line string) {
		for _, m := range anchorID.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		a := anchor(m[2])
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	})
	return out
}

// anchor is GitHub's anchor of a heading: its text lowercased, without
// Markdown's code marks, spaces turned into hyphens, and every character
// but letters, digits, '-' and '_' dropped.
func anchor(text string) string {
	text = strings.ToLower(strings.ReplaceAll(text, "`", ""))
	var b strings.Builder
	for _, r := range text {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// eachProseLine calls f with each line of doc outside fenced and indented
// code blocks, numbered from 1.
func eachProseLine(doc string, f func(n int, line string)) {
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	fence := ""
	prevBlank, inIndented := true, false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			prevBlank = false
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		blank := strings.TrimSpace(line) == ""
		if !blank && strings.HasPrefix(line, "    ") && (prevBlank || inIndented) && !listItem.MatchString(trimmed) {
			inIndented = true
			prevBlank = false
			continue
		}
		if !blank {
			inIndented = false
		}
		prevBlank = blank
		f(n, line)
	}
}

// listItem is the start of a list item, whose continuation lines may be
// indented like code.
var listItem = regexp.MustCompile(`^([-*+]|\d+[.)])\s`)
