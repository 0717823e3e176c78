// Package configtest checks a settings struct the way the conch command
// fills it: from its arguments and environment variables alone.
package configtest

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/config"
)

// Case is one set of settings: arguments, environment (KEY=value), and
// the flag or variable its error must name ("" when it is valid).
type Case struct {
	Name      string
	Args, Env []string
	WantField string
}

// Load fills cfg from args and env alone, as conch fills it from its
// command line and environment.
func Load(cfg any, args, env []string) error {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return config.LoadWith(fs, args, cfg, func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	})
}

// ErrorsNameTheField loads each case into a new struct from newConfig: a
// valid case must load, and every other must fail with an error that
// names the flag or variable at fault.
func ErrorsNameTheField(t *testing.T, newConfig func() any, cases []Case) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			err := Load(newConfig(), c.Args, c.Env)
			if c.WantField == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.WantField) {
				t.Fatalf("error = %v, want one naming %s", err, c.WantField)
			}
		})
	}
}

// Defaults loads into cfg (a pointer to a config struct) what its tags
// give with no flag and no variable set: for a test that compares a
// package's default constants with its tags, so the two cannot drift. A
// default that does not parse fails the test; what the settings' Validate
// says of them does not (a service needs secrets no default gives).
func Defaults(t *testing.T, cfg any) {
	t.Helper()
	fs := flag.NewFlagSet("defaults", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := config.LoadWith(fs, nil, cfg, func(string) (string, bool) { return "", false })
	var fe *config.FieldError
	if err != nil && (!errors.As(err, &fe) || strings.HasPrefix(fe.Err.Error(), "default: ")) {
		t.Fatal(err)
	}
}
