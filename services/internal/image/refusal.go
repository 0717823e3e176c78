package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrRefused matches every *Refusal.
var ErrRefused = errors.New("template: refused")

// Refusal says which entry of an image breaks which template rule, in words
// meant for the tenant who made the image. Path is the entry as the image
// names it, or empty when the rule concerns the image as a whole.
type Refusal struct {
	Path   string
	Reason string
}

func refuse(path, format string, args ...any) *Refusal {
	return &Refusal{Path: path, Reason: fmt.Sprintf(format, args...)}
}

func (r *Refusal) Error() string {
	if r.Path == "" {
		return "template: " + printable(r.Reason)
	}
	return "template: " + printable(r.Path) + ": " + printable(r.Reason)
}

// Is makes errors.Is(err, ErrRefused) true for every refusal.
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

// printable quotes a tenant's path when it holds anything that could
// garble a log line or a terminal.
func printable(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// Limits bound what an image's root may hold.
type Limits struct {
	MaxBytes int64 // content bytes of the root's regular files
	MaxFiles int   // entries in the root, directories and links included
}

func (l Limits) validate() error {
	if l.MaxBytes <= 0 || l.MaxFiles <= 0 {
		return fmt.Errorf("image: limits must be positive (MaxBytes %d, MaxFiles %d)", l.MaxBytes, l.MaxFiles)
	}
	return nil
}

// tally counts a root against its limits as the entries stream by, so the
// entry that crosses a limit is refused before its content is read.
type tally struct {
	lim   Limits
	files int
	bytes int64
}

func (t *tally) add(e entry) error {
	t.files++
	if t.files > t.lim.MaxFiles {
		return refuse("", "image root has more than the limit of %d entries", t.lim.MaxFiles)
	}
	if e.typ == tar.TypeReg {
		if e.size > t.lim.MaxBytes-t.bytes {
			return refuse("", "image root is larger than the limit of %s", FormatBytes(t.lim.MaxBytes))
		}
		t.bytes += e.size
	}
	return nil
}

// FormatBytes writes n in the largest binary unit that holds it whole.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
