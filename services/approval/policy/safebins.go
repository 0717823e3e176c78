package policy

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/itchyny/gojq"
)

// DefaultSafeBins are the binaries that run in allowlist mode as stream
// filters without an allowlist entry.
var DefaultSafeBins = []string{"jq", "grep", "cut", "sort", "uniq", "head", "tail", "tr", "wc"}

// DefaultSafeBinDirs are the system bin dirs a safe bin is trusted from.
var DefaultSafeBinDirs = []string{"/bin", "/usr/bin"}

// flagKind says whether a flag takes a value.
type flagKind int8

const (
	flagBool     flagKind = iota + 1
	flagValue             // takes the next word or the rest of a short cluster / =value
	flagValue2            // takes the next two words (jq --arg name value)
	flagOptional          // long only: --flag or --flag=value
)

// profile is what a safe bin may be given: its flags, how many positional
// arguments (patterns or sets, never files) and which flags are refused
// outright (listed for the message; anything not allowed is refused too).
type profile struct {
	short      map[byte]flagKind
	long       map[string]flagKind
	denied     map[string]string // flag → why
	positional int
	// numeric allows the obsolete "-NUM" count (head -5).
	numeric bool
	// patternFlags, when given, take the place of the positional pattern.
	patternFlags []string
	// check judges the positional arguments themselves (jq filters).
	check func(args []string) error
}

func shorts(kinds map[flagKind]string) map[byte]flagKind {
	out := map[byte]flagKind{}
	for k, s := range kinds {
		for i := 0; i < len(s); i++ {
			out[s[i]] = k
		}
	}
	return out
}

func longs(kinds map[flagKind]string) map[string]flagKind {
	out := map[string]flagKind{}
	for k, s := range kinds {
		for _, n := range strings.Fields(s) {
			out[n] = k
		}
	}
	return out
}

var profiles = map[string]*profile{
	"grep": {
		short: shorts(map[flagKind]string{flagBool: "EFGPiyvwxcoqsnhHbaUzZlLT", flagValue: "mABCe"}),
		long: longs(map[flagKind]string{
			flagBool:     "extended-regexp fixed-strings basic-regexp perl-regexp ignore-case no-ignore-case invert-match word-regexp line-regexp count only-matching quiet silent line-number no-filename with-filename byte-offset text null-data null files-with-matches files-without-match line-buffered initial-tab binary no-messages",
			flagValue:    "max-count after-context before-context context regexp label",
			flagOptional: "color colour",
		}),
		denied: map[string]string{
			"f": "reads patterns from a file", "file": "reads patterns from a file",
			"r": "reads files", "R": "reads files", "recursive": "reads files", "dereference-recursive": "reads files",
			"d": "reads directories", "directories": "reads directories", "D": "reads devices", "devices": "reads devices",
			"include": "selects files", "exclude": "selects files", "exclude-from": "reads a file", "exclude-dir": "selects files",
		},
		positional:   1,
		patternFlags: []string{"e", "regexp"},
	},
	"jq": {
		short: shorts(map[flagKind]string{flagBool: "rjcnseSCMaR"}),
		long: longs(map[flagKind]string{
			flagBool:   "raw-output raw-output0 join-output compact-output null-input slurp exit-status sort-keys color-output monochrome-output ascii-output raw-input seq stream stream-errors tab",
			flagValue:  "indent",
			flagValue2: "arg argjson",
		}),
		denied: map[string]string{
			"f": "reads the filter from a file", "from-file": "reads the filter from a file",
			"L": "loads modules from a directory", "library-path": "loads modules from a directory",
			"rawfile": "reads a file", "slurpfile": "reads a file",
			"args": "takes positional arguments", "jsonargs": "takes positional arguments",
		},
		positional: 1,
		check:      checkJQ,
	},
	"cut": {
		short: shorts(map[flagKind]string{flagBool: "snz", flagValue: "bcfd"}),
		long: longs(map[flagKind]string{
			flagBool:  "complement only-delimited zero-terminated",
			flagValue: "bytes characters fields delimiter output-delimiter",
		}),
	},
	"sort": {
		short: shorts(map[flagKind]string{flagBool: "bdfgiMhnRrVcCsuz", flagValue: "ktS"}),
		long: longs(map[flagKind]string{
			flagBool:  "ignore-leading-blanks dictionary-order ignore-case general-numeric-sort ignore-nonprinting month-sort human-numeric-sort numeric-sort random-sort reverse version-sort check stable unique zero-terminated",
			flagValue: "key field-separator buffer-size parallel sort",
		}),
		denied: map[string]string{
			"o": "writes a file", "output": "writes a file",
			"T": "writes temporary files", "temporary-directory": "writes temporary files",
			"compress-program": "runs a program", "files0-from": "reads a file", "random-source": "reads a file",
			"m": "merges files", "merge": "merges files",
		},
	},
	"uniq": {
		short: shorts(map[flagKind]string{flagBool: "cdDiuz", flagValue: "fsw"}),
		long: longs(map[flagKind]string{
			flagBool:     "count repeated ignore-case unique zero-terminated",
			flagValue:    "skip-fields skip-chars check-chars",
			flagOptional: "all-repeated group",
		}),
	},
	"head": {
		short:   shorts(map[flagKind]string{flagBool: "qvz", flagValue: "nc"}),
		long:    longs(map[flagKind]string{flagBool: "quiet silent verbose zero-terminated", flagValue: "lines bytes"}),
		numeric: true,
	},
	"tail": {
		short: shorts(map[flagKind]string{flagBool: "qvz", flagValue: "nc"}),
		long:  longs(map[flagKind]string{flagBool: "quiet silent verbose zero-terminated", flagValue: "lines bytes"}),
		denied: map[string]string{
			"f": "follows files", "F": "follows files", "follow": "follows files", "pid": "watches a process",
		},
		numeric: true,
	},
	"tr": {
		short:      shorts(map[flagKind]string{flagBool: "cCdst"}),
		long:       longs(map[flagKind]string{flagBool: "complement delete squeeze-repeats truncate-set1"}),
		positional: 2,
	},
	"wc": {
		short:  shorts(map[flagKind]string{flagBool: "cmlLw"}),
		long:   longs(map[flagKind]string{flagBool: "bytes chars lines max-line-length words", flagValue: "total"}),
		denied: map[string]string{"files0-from": "reads a file"},
	},
}

// bareProfile is the profile of a configured safe bin conch has no profile
// for: it may run without any argument at all, since nothing is known about
// what its flags do.
var bareProfile = &profile{}

// safeBinAssignments are what a safe bin runs with: a HOME that can hold
// nothing (not even a directory), so no dotfile such as ~/.jq, which jq
// loads as code, is read from a workspace a command could write.
var safeBinAssignments = assignments(map[string]string{"HOME": "/dev/null"})

// jqForbidden are jq functions and variables that read the environment or
// files or describe the program's own location.
var jqForbidden = map[string]bool{
	"env": true, "$ENV": true, "input_filename": true, "$__loc__": true, "$__prog_args": true,
	"modulemeta": true, "get_search_list": true, "get_prog_origin": true, "get_jq_origin": true,
	"input_line_number": true,
}

// checkJQ judges jq filters by their syntax tree. jq's own lexer allows
// a space or a comment between $ and a name ("$ ENV"); the jq parser used
// here does not, so a filter spelled that way is refused before parsing
// instead of being read differently.
func checkJQ(args []string) error {
	for _, a := range args {
		if i := jqLooseDollar(a); i >= 0 {
			return fmt.Errorf("jq filter has a $ not followed by a name at offset %d", i)
		}
		q, err := gojq.Parse(a)
		if err != nil {
			return fmt.Errorf("jq filter does not parse: %v", err)
		}
		if name := jqForbiddenUse(reflect.ValueOf(q)); name != "" {
			return fmt.Errorf("jq filter uses %s, which reads the environment, files or modules", name)
		}
	}
	return nil
}

// jqLooseDollar returns the offset of a $ outside string literals that is
// not directly followed by an identifier, or -1.
func jqLooseDollar(s string) int {
	inStr := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case !inStr && c == '#':
			// A comment runs to the end of the line.
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case !inStr && c == '$':
			if i+1 >= len(s) || !(s[i+1] == '_' || s[i+1] >= 'a' && s[i+1] <= 'z' || s[i+1] >= 'A' && s[i+1] <= 'Z') {
				return i
			}
		}
	}
	return -1
}

// jqForbiddenUse walks a parsed jq program and returns the first forbidden
// function, variable or module load in it, in definitions and string
// interpolations too.
func jqForbiddenUse(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return ""
		}
		switch n := v.Interface().(type) {
		case *gojq.Func:
			if jqForbidden[n.Name] {
				return n.Name
			}
		case *gojq.ObjectKeyVal:
			if jqForbidden[n.Key] {
				return n.Key
			}
		case *gojq.Query:
			if len(n.Imports) > 0 {
				return "import or include"
			}
		}
		return jqForbiddenUse(v.Elem())
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				if name := jqForbiddenUse(v.Field(i)); name != "" {
					return name
				}
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			if name := jqForbiddenUse(v.Index(i)); name != "" {
				return name
			}
		}
	}
	return ""
}

// checkSafeArgs judges the arguments of a safe bin against its profile.
func checkSafeArgs(name string, p *profile, args []string) error {
	var positional []string
	patternGiven := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			n, v, hasV := strings.Cut(a[2:], "=")
			if why, ok := p.denied[n]; ok {
				return fmt.Errorf("%s: --%s %s", name, n, why)
			}
			k, ok := p.long[n]
			if !ok {
				return fmt.Errorf("%s: unknown or abbreviated flag --%s", name, n)
			}
			switch k {
			case flagBool:
				if hasV {
					return fmt.Errorf("%s: --%s takes no value", name, n)
				}
			case flagOptional:
			case flagValue:
				if !hasV {
					if i+1 >= len(args) {
						return fmt.Errorf("%s: --%s needs a value", name, n)
					}
					i++
				}
			case flagValue2:
				if hasV || i+2 >= len(args) {
					return fmt.Errorf("%s: --%s needs two values", name, n)
				}
				i += 2
			}
			_ = v
			for _, pf := range p.patternFlags {
				if pf == n {
					patternGiven = true
				}
			}
		case len(a) > 1 && a[0] == '-':
			if p.numeric && allDigits(a[1:]) {
				continue
			}
			for j := 1; j < len(a); j++ {
				c := a[j]
				if why, ok := p.denied[string(c)]; ok {
					return fmt.Errorf("%s: -%c %s", name, c, why)
				}
				k, ok := p.short[c]
				if !ok {
					return fmt.Errorf("%s: unknown flag -%c", name, c)
				}
				for _, pf := range p.patternFlags {
					if pf == string(c) {
						patternGiven = true
					}
				}
				if k == flagValue {
					if j+1 == len(a) {
						if i+1 >= len(args) {
							return fmt.Errorf("%s: -%c needs a value", name, c)
						}
						i++
					}
					break
				}
			}
		default:
			positional = append(positional, a)
		}
	}
	limit := p.positional
	if patternGiven {
		limit = 0
	}
	if len(positional) > limit {
		return fmt.Errorf("%s: a safe bin reads only stdin; %q looks like a file argument", name, positional[limit])
	}
	if p.check != nil {
		if err := p.check(positional); err != nil {
			return err
		}
	}
	return nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
