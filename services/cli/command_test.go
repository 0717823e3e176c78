package cli

import (
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// run runs the client command line args (its first word is the command's
// name) as conch does, with no input.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	c, ok := LookupCommand(args[0])
	if !ok {
		t.Fatalf("no client command %q", args[0])
	}
	var out, errOut strings.Builder
	err = c.Run(t.Context(), args[1:], strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), err
}

// Each command of a group has its own help: its line of the group's
// usage, its prose and its flags.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args         []string
		wantFirst    string
		want, absent []string
	}{
		{[]string{"gateways", "create", "-h"}, "usage: conch gateways create NAME [flags]",
			[]string{"Create a gateway.", "--provider PROVIDER", "docs/reference/gateways.md"}, []string{"rm NAME", "--replace"}},
		{[]string{"gateways", "update", "prod", "--help"}, "usage: conch gateways update NAME [flags]",
			[]string{"the rest of the gateway", "--replace"}, nil},
		{[]string{"gateways", "list", "--help"}, "usage: conch gateways list",
			[]string{"List the account's gateways.", "Common flags:\n  --api-key KEY"}, []string{"--provider", "\nFlags:"}},
		{[]string{"approvals", "allowlist", "add", "--help"}, "usage: conch approvals allowlist add AGENT PATTERN",
			[]string{"Add a glob"}, []string{"allowlist rm"}},
		{[]string{"approvals", "allowlist", "--help"}, "usage: conch approvals allowlist <command> [flags]",
			[]string{"allowlist rm AGENT ID|PATTERN", "Run 'conch approvals allowlist <command> --help'"}, []string{"export"}},
		{[]string{"approvals", "approve", "-h"}, "usage: conch approvals approve ID [--session|--always]",
			[]string{"Allow a pending command once", "--always\n"}, []string{"--state"}},
		{[]string{"audit", "verify", "--help"}, "usage: conch audit verify [flags]",
			[]string{"hash chains", "--account ID"}, []string{"--since"}},
		{[]string{"audit", "--help"}, "usage: conch audit [list] [flags]", []string{"verify"}, nil},
		{[]string{"files", "--user", "u", "rm", "-h"}, "usage: conch files rm [-r] <path>",
			[]string{"  -r\n", "--user USER", "Common flags"}, []string{"mkdir", "--expires"}},
		{[]string{"files", "put", "--help"}, "usage: conch files put <local> <path>",
			[]string{"--progress WHEN", "--user USER"}, nil},
		{[]string{"nodes", "--help"}, "usage: conch nodes <command> [flags]",
			[]string{"create NAME", "rm NAME", "Run 'conch nodes <command> --help'"}, nil},
		{[]string{"nodes", "help"}, "usage: conch nodes <command> [flags]", nil, nil},
		{[]string{"nodes", "help", "create"}, "usage: conch nodes create NAME", []string{"conch node --join"}, nil},
		{[]string{"sandbox", "exec", "sb-1", "--help"}, "usage: conch sandbox exec [flags] <id> [--] <command...>",
			[]string{"conch sandbox exec ID -- ls -la", "--env K=V"}, nil},
		{[]string{"chat", "-h"}, "usage: conch chat [flags]", []string{"--model GATEWAY", "-m TEXT", "With -o json"}, nil},
		{[]string{"mcp", "--help"}, "usage: conch mcp [flags]", []string{"--gateway NAME"}, nil},
		{[]string{"login", "--help"}, "usage: conch login [--server URL] [--api-key KEY]",
			[]string{"Flags:\n  --api-key KEY"}, []string{"--data-dir", "Common flags"}},
		{[]string{"logout", "-h"}, "usage: conch logout", nil, []string{"Flags"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			got, errOut, err := run(t, tc.args...)
			if !errors.Is(err, flag.ErrHelp) || errOut != "" {
				t.Fatalf("err %v, stderr %q; want help asked for, on stdout", err, errOut)
			}
			if first, _, _ := strings.Cut(got, "\n"); first != tc.wantFirst {
				t.Errorf("first line %q, want %q\n%s", first, tc.wantFirst, got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("help lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tc.absent {
				if strings.Contains(got, w) {
					t.Errorf("help holds %q:\n%s", w, got)
				}
			}
		})
	}
}

// helpPage is a client command line whose help the reference shows, with
// the flag set its help is to list.
type helpPage struct {
	args []string
	fs   *flag.FlagSet
}

// helpPages are the help of every client command, of each of its
// commands, and of the first word of those of two words.
func helpPages() []helpPage {
	var pages []helpPage
	for _, c := range Commands() {
		pages = append(pages, helpPage{[]string{c.Name}, c.group.flags("")})
		for _, sub := range c.Subcommands() {
			fs := c.group.flags("")
			if _, ok := c.group.entry(sub); ok {
				fs = c.group.flags(sub)
			}
			pages = append(pages, helpPage{append([]string{c.Name}, strings.Fields(sub)...), fs})
		}
	}
	return pages
}

var (
	// flagLine starts a flag's entry in a Flags block: "  --name" or
	// "  -n", then its placeholder or the end of the line.
	flagLine = regexp.MustCompile(`(?m)^  (--?)([a-zA-Z0-9][a-zA-Z0-9-]*)(?: |$)`)
	// flagWord is a flag named anywhere: at the start of a word, "-x",
	// "--name" or "--name=value".
	flagWord = regexp.MustCompile(`(?:^|[\s(\[|,"'])--?([a-zA-Z][a-zA-Z0-9-]*)`)
)

// flagBlocks are the "Flags:" and "Common flags:" blocks of help.
func flagBlocks(help string) string {
	var b strings.Builder
	for _, block := range strings.Split(help, "\n\n") {
		if title, body, _ := strings.Cut(block, "\n"); title == "Flags:" || title == "Common flags:" {
			b.WriteString(body + "\n")
		}
	}
	return b.String()
}

// The help of every client command lists each flag its flag set defines,
// named as it is typed (-o, --server), and names no flag the set lacks:
// in the flag blocks, nor in the synopsis. Help and parser read the same
// flag set, so they cannot drift apart.
func TestHelpListsItsFlagSet(t *testing.T) {
	t.Parallel()
	for _, p := range helpPages() {
		t.Run(strings.Join(p.args, " "), func(t *testing.T) {
			t.Parallel()
			help, _, err := run(t, append(p.args, "--help")...)
			if !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("--help: %v", err)
			}
			var want []string
			p.fs.VisitAll(func(f *flag.Flag) { want = append(want, f.Name) })
			blocks := flagBlocks(help)
			var listed []string
			for _, m := range flagLine.FindAllStringSubmatch(blocks, -1) {
				if m[1]+m[2] != flagName(m[2]) {
					t.Errorf("flag %s%s is not written as it is typed: %s", m[1], m[2], flagName(m[2]))
				}
				listed = append(listed, m[2])
			}
			slices.Sort(want)
			slices.Sort(listed)
			if diff := cmp.Diff(want, listed); diff != "" {
				t.Errorf("flags listed differ from the flag set's (-want +got):\n%s\n%s", diff, help)
			}
			synopsis, _, _ := strings.Cut(help, "\n")
			for _, text := range []string{blocks, synopsis} {
				for _, m := range flagWord.FindAllStringSubmatch(text, -1) {
					if p.fs.Lookup(m[1]) == nil {
						t.Errorf("help names --%s, which the command does not take:\n%s", m[1], help)
					}
				}
			}
		})
	}
}

// A group's word without a command, or with a word that names none, is a
// one-line usage error naming the commands there are, and nothing is sent
// to the server.
func TestCommandMissingOrUnknown(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	type line struct {
		args []string
		want string
	}
	lines := []line{
		{[]string{"approvals", "allowlist"},
			"conch approvals allowlist: missing command: list, add or rm (see 'conch approvals allowlist --help')"},
		{[]string{"approvals", "-o", "json", "allowlist"},
			"conch approvals allowlist: missing command: list, add or rm (see 'conch approvals allowlist --help')"},
		{[]string{"approvals", "allowlist", "ad", "default", "/bin/x"},
			`conch approvals allowlist: unknown command "ad"; did you mean "add"? (see 'conch approvals allowlist --help')`},
		{[]string{"gateways"},
			"conch gateways: missing command: list, get, create, update or rm (see 'conch gateways --help')"},
		{[]string{"files", "--user", "u"},
			"conch files: missing command: ls, get, put, rm, mkdir or url (see 'conch files --help')"},
		{[]string{"audit", "lst"},
			`conch audit: unknown command "lst"; did you mean "list"? (see 'conch audit --help')`},
	}
	// And every group and first word of commands of two, without a
	// command; audit has one it runs then.
	for _, c := range Commands() {
		for _, sub := range append([]string{""}, c.Subcommands()...) {
			if _, ok := c.group.entry(sub); ok || len(c.group.commands()) == 0 || sub == "" && c.group.fallback != "" {
				continue
			}
			cmd := c.group.full(sub)
			lines = append(lines, line{append([]string{c.Name}, strings.Fields(sub)...),
				cmd + ": missing command: " + orList(c.group.next(sub)) + " (see '" + cmd + " --help')"})
		}
	}
	for _, l := range lines {
		t.Run(strings.Join(l.args, " "), func(t *testing.T) {
			t.Parallel()
			stdout, stderr, err := run(t, append(l.args, "--server", srv.URL, "--api-key", "k")...)
			if !errors.Is(err, ErrUsage) || err.Error() != l.want || stdout+stderr != "" {
				t.Errorf("err %v, stdout %q, stderr %q; want the usage error %q alone", err, stdout, stderr, l.want)
			}
		})
	}
	t.Cleanup(func() {
		if n := requests.Load(); n != 0 {
			t.Errorf("%d requests sent for command lines that name no command", n)
		}
	})
}

// Flags may stand before a group's command too: the command is the first
// word that is neither a flag nor a flag's value, whichever of the group's
// commands defines the flag.
func TestCommandWord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		g        *group
		args     []string
		wantCmd  string
		wantRest []string
	}{
		{filesGroup, []string{"-o", "json", "ls", "/in"}, "ls", []string{"-o", "json", "/in"}},
		{filesGroup, []string{"ls", "/in", "-o", "json"}, "ls", []string{"/in", "-o", "json"}},
		{filesGroup, []string{"--user=u", "-r", "rm", "/d"}, "rm", []string{"--user=u", "-r", "/d"}},
		{filesGroup, []string{"--expires", "10m", "url", "/f"}, "url", []string{"--expires", "10m", "/f"}},
		{auditGroup, []string{"--gateway", "g", "--since", "1h"}, "list", []string{"--gateway", "g", "--since", "1h"}},
		{auditGroup, []string{"verify", "--account", "a"}, "verify", []string{"--account", "a"}},
		{approvalsGroup, []string{"--server", "http://x", "allowlist", "-o", "json", "add", "a", "p"}, "allowlist add",
			[]string{"--server", "http://x", "-o", "json", "a", "p"}},
		{sandboxGroup, []string{"exec", "id", "--", "ls", "-la"}, "exec", []string{"id", "--", "ls", "-la"}},
		{chatGroup, []string{"-m", "hi"}, "", []string{"-m", "hi"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			cmd, rest, err := tc.g.command(tc.args)
			if err != nil || cmd != tc.wantCmd || !slices.Equal(rest, tc.wantRest) {
				t.Errorf("command = %q %q %v, want %q %q", cmd, rest, err, tc.wantCmd, tc.wantRest)
			}
		})
	}
}

// A command is given the arguments its synopsis says, or it is a usage
// error that says the synopsis, before a client is even made (no key is
// needed to be told).
func TestCommandArguments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gateways", "get"}, "conch gateways get: want get NAME (see 'conch gateways get --help')"},
		{[]string{"gateways", "rm", "a", "b"}, "conch gateways rm: want rm NAME (see 'conch gateways rm --help')"},
		{[]string{"approvals", "allowlist", "add", "default"},
			"conch approvals allowlist add: want allowlist add AGENT PATTERN (see 'conch approvals allowlist add --help')"},
		{[]string{"files", "put", "x"}, "conch files put: want put <local> <path> (see 'conch files put --help')"},
		{[]string{"sandbox", "exec", "id"}, "conch sandbox exec: want exec [flags] <id> [--] <command...> (see 'conch sandbox exec --help')"},
		{[]string{"chat", "hello"}, `conch chat: unexpected arguments ["hello"] (see 'conch chat --help')`},
		{[]string{"logout", "now"}, `conch logout: unexpected arguments ["now"] (see 'conch logout --help')`},
		{[]string{"approvals", "deny", "id", "--always"},
			"conch approvals deny: unknown flag --always (see 'conch approvals deny --help')"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			_, _, err := run(t, tc.args...)
			if !errors.Is(err, ErrUsage) || err.Error() != tc.want {
				t.Errorf("err %v, want the usage error %q", err, tc.want)
			}
		})
	}
}

// conch --help lists every client command with its summary.
func TestUsageListsTheClientCommands(t *testing.T) {
	t.Parallel()
	usage := Usage()
	for _, c := range Commands() {
		if !strings.Contains(usage, "\n  "+c.Name+strings.Repeat(" ", 12-len(c.Name))+c.Summary+"\n") {
			t.Errorf("conch --help lacks %s:\n%s", c.Name, usage)
		}
	}
}
