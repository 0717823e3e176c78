package cli

import (
	"errors"
	"flag"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSuggest(t *testing.T) {
	t.Parallel()
	cmds := []string{"approvals", "audit", "chat", "gateways", "sandbox", "version"}
	for _, tc := range []struct {
		word, want string
	}{
		{"sandbx", "sandbox"},
		{"snadbox", "sandbox"},
		{"gatways", "gateways"},
		{"GATEWAYS", "gateways"},
		{"aprovals", "approvals"},
		{"ver", "version"}, // a prefix
		{"chta", "chat"},
		{"xyz", ""},
		{"a", ""}, // one letter is no one's prefix worth guessing
		{"deploy", ""},
	} {
		t.Run(tc.word, func(t *testing.T) {
			t.Parallel()
			if got := Suggest(tc.word, cmds); got != tc.want {
				t.Errorf("Suggest(%q) = %q, want %q", tc.word, got, tc.want)
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3},
		{"sandbox", "sandbx", 1}, {"exec", "exce", 2}, {"née", "nee", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// parseFlags takes flags before and after the arguments, and none after
// "--".
func TestParseFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		wantPos []string
		wantEnv string
		wantM   bool
		wantErr string
	}{
		{"flags first", []string{"--env", "A=1", "id", "echo hi"}, []string{"id", "echo hi"}, "A=1", false, ""},
		{"flags after the arguments", []string{"id", "--env", "FOO=bar", "echo $FOO"}, []string{"id", "echo $FOO"}, "FOO=bar", false, ""},
		{"flags at the end", []string{"id", "true", "-m"}, []string{"id", "true"}, "", true, ""},
		{"-- ends the flags", []string{"id", "--env", "A=1", "--", "ls", "-la", "--env", "B=2"}, []string{"id", "ls", "-la", "--env", "B=2"}, "A=1", false, ""},
		{"-- first", []string{"--", "-m"}, []string{"-m"}, "", false, ""},
		{"a lone -", []string{"-", "x"}, []string{"-", "x"}, "", false, ""},
		{"unknown flag, suggested", []string{"id", "--envv", "A=1"}, nil, "", false,
			"conch sandbox exec: unknown flag --envv; did you mean --env? (see 'conch sandbox exec --help')"},
		{"unknown flag, nothing close", []string{"--zzzzzz"}, nil, "", false,
			"conch sandbox exec: unknown flag --zzzzzz (see 'conch sandbox exec --help')"},
		{"bad value", []string{"--env", "novalue"}, nil, "", false,
			`conch sandbox exec: invalid value "novalue" for flag -env: want K=V, got "novalue" (see 'conch sandbox exec --help')`},
		{"missing value", []string{"id", "--env"}, nil, "", false,
			"conch sandbox exec: flag needs an argument: -env (see 'conch sandbox exec --help')"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("conch sandbox exec", flag.ContinueOnError)
			var env envFlag
			fs.Var(&env, "env", "")
			m := fs.Bool("m", false, "")
			pos, err := parseFlags(fs, fs.Name(), tc.args)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, ErrUsage) {
					t.Fatalf("err = %v, want usage error %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantPos, pos); diff != "" {
				t.Errorf("positional (-want +got):\n%s", diff)
			}
			if env.String() != tc.wantEnv || *m != tc.wantM {
				t.Errorf("env %q m %v, want %q %v", env.String(), *m, tc.wantEnv, tc.wantM)
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		word, want string
	}{
		{"exce", `conch sandbox: unknown command "exce"; did you mean "exec"? (see 'conch sandbox --help')`},
		{"launch", `conch sandbox: unknown command "launch" (see 'conch sandbox --help')`},
	} {
		err := UnknownCommand("conch sandbox", tc.word, []string{"create", "exec", "list", "rm"})
		if err.Error() != tc.want || !errors.Is(err, ErrUsage) {
			t.Errorf("UnknownCommand(%q) = %v, want usage error %q", tc.word, err, tc.want)
		}
	}
}
