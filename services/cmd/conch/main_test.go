package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/conch-sh/conch/services/cli"
	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/launch"
)

// Each way a command ends has its exit code, as docker, kubectl and the
// shell use them, and is said in at most one line.
func TestExitCodeAndReport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		err        error
		wantCode   int
		wantReport string
	}{
		{"error", errors.New("boom"), 1, "conch: boom\n"},
		{"usage", cli.Usagef("bad"), 2, "conch: bad\n"},
		{"usage of a command", &cli.UsageError{Cmd: "conch chat", Msg: "unknown flag -x"}, 2, "conch chat: unknown flag -x\n"},
		{"usage already printed", cli.ErrUsage, 2, ""},
		{"help", flag.ErrHelp, 0, ""},
		{"timeout", fmt.Errorf("command %w", cli.ErrTimeout), 124, "conch: command timed out\n"},
		{"interrupt", cli.ErrInterrupted, 130, ""},
		{"remote exit", &cli.ExitError{Code: 7}, 7, ""},
		{"cancelled", context.Canceled, 1, "conch: context canceled\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := exitCode(tc.err); got != tc.wantCode {
				t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.wantCode)
			}
			var b bytes.Buffer
			report(&b, []string{"x"}, tc.err)
			if b.String() != tc.wantReport {
				t.Errorf("report(%v) = %q, want %q", tc.err, b.String(), tc.wantReport)
			}
		})
	}
}

// A mistyped command is one line with the closest command; no usage dump.
func TestUnknownCommandIsOneLine(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"sandbx", "list"}, &stdout, &stderr)
	if exitCode(err) != 2 || stdout.Len() != 0 || stderr.Len() != 0 {
		t.Fatalf("err %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
	var b bytes.Buffer
	report(&b, nil, err)
	if want := "conch: unknown command \"sandbx\"; did you mean \"sandbox\"? (see 'conch --help')\n"; b.String() != want {
		t.Errorf("report = %q, want %q", b.String(), want)
	}
}

// A server command's --help is its own usage, on stdout, exit code 0; a
// bad flag is one line, exit code 2.
func TestServerCommandUsage(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"dev", "--help"}, &stdout, &stderr)
	if exitCode(err) != 0 || !bytes.HasPrefix(stdout.Bytes(), []byte("usage: conch dev [flags]\n")) || bytes.Contains(stdout.Bytes(), []byte("Usage of")) {
		t.Errorf("dev --help: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	stdout.Reset()
	err = run(t.Context(), []string{"router", "--htp-addr", ":1"}, &stdout, &stderr)
	want := "conch router: unknown flag --htp-addr; did you mean --http-addr? (see 'conch router --help')"
	if exitCode(err) != 2 || err.Error() != want || stdout.Len()+stderr.Len() != 0 {
		t.Errorf("router --htp-addr: %v, want %q\n%s%s", err, want, stdout.String(), stderr.String())
	}
}

// Every command's help goes to stdout with code 0; a mistyped or missing
// subcommand is one error with code 2 and nothing printed before it.
func TestHelpAndMistypes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args       []string
		wantCode   int
		wantStdout string
		wantErr    string
	}{
		{[]string{"--help"}, 0, "usage: conch <command>", ""},
		{[]string{"secrets", "--help"}, 0, "usage: conch secrets rotate", ""},
		{[]string{"etcd-pki", "-h"}, 0, "usage: conch etcd-pki", ""},
		{[]string{"executor", "--help"}, 0, "usage: conch executor [flags]", ""},
		{[]string{"secrets", "rotat"}, 2, "", `conch secrets: unknown command "rotat"; did you mean "rotate"? (see 'conch secrets --help')`},
		{[]string{"sandbox", "lst"}, 2, "", `conch sandbox: unknown command "lst"; did you mean "list"? (see 'conch sandbox --help')`},
		{[]string{"gateway", "list"}, 2, "", `conch: unknown command "gateway"; did you mean "gateways"? (see 'conch --help')`},
		{[]string{"approvals", "allowlist"}, 2, "", `conch approvals allowlist: missing command: list, add or rm (see 'conch approvals allowlist --help')`},
		{[]string{"gateways", "create", "--help"}, 0, "usage: conch gateways create NAME [flags]", ""},
		{[]string{"logot"}, 2, "", `conch: unknown command "logot"; did you mean "logout"? (see 'conch --help')`},
	} {
		t.Run(tc.args[0]+" "+tc.args[len(tc.args)-1], func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tc.args, &stdout, &stderr)
			if got := exitCode(err); err != nil && got != tc.wantCode || err == nil && tc.wantCode != 0 {
				t.Errorf("exit code %d (%v), want %d", got, err, tc.wantCode)
			}
			if !bytes.HasPrefix(stdout.Bytes(), []byte(tc.wantStdout)) || tc.wantStdout == "" && stdout.Len() > 0 {
				t.Errorf("stdout %q, want it to start %q", stdout.String(), tc.wantStdout)
			}
			if tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr || stderr.Len() > 0) {
				t.Errorf("err %v, stderr %q; want %q alone", err, stderr.String(), tc.wantErr)
			}
		})
	}
}

// Each command of launch.Commands takes the configuration the table names:
// its --help lists exactly that configuration's flags. The generated
// configuration reference reads the table, so it says what conch does.
func TestCommandsTakeTheirConfig(t *testing.T) {
	t.Parallel()
	flagLine := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	for _, c := range launch.Commands() {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			fields, err := config.Fields(c.Config())
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, f := range fields {
				if f.Flag != "" {
					want = append(want, f.Flag)
				}
			}
			var stdout, stderr bytes.Buffer
			err = run(t.Context(), append(strings.Fields(c.Name), "--help"), &stdout, &stderr)
			if exitCode(err) != 0 {
				t.Fatalf("--help: %v\n%s", err, stderr.String())
			}
			var got []string
			for _, m := range flagLine.FindAllStringSubmatch(stdout.String(), -1) {
				got = append(got, m[1])
			}
			slices.Sort(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("flags of conch %s --help differ from launch.Commands' configuration (-want +got):\n%s", c.Name, diff)
			}
		})
	}
}
