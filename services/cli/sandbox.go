package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
)

const sandboxUsage = `usage: conch sandbox <command> [flags]

Commands:
  create [--user U] [--persistent]     create a sandbox and print its id
  exec [flags] <id> [--] <command...>  run a command; its output and exit code become ours
  list                                 list the account's sandboxes
  rm <id>...                           destroy sandboxes

Run 'conch sandbox <command> --help' for a command's flags.
`

// sandboxCommands are the usage lines of each sandbox command.
var sandboxCommands = map[string]string{
	"create": `usage: conch sandbox create [--user U] [--persistent]

Creates a sandbox and prints its id.
`,
	"exec": `usage: conch sandbox exec [flags] <id> [--] <command...>

Runs a command in a sandbox: its output and exit code become conch's
(124 when it timed out). Flags may stand anywhere before "--"; everything
after "--" is the command, so its own flags need no quoting:

  conch sandbox exec ID --env FOO=bar 'echo $FOO'
  conch sandbox exec ID -- ls -la
`,
	"list": `usage: conch sandbox list

Lists the account's sandboxes: id, state, working directory, user.
`,
	"rm": `usage: conch sandbox rm <id>...

Destroys sandboxes.
`,
}

// ExitError carries the exit code of a remote command.
type ExitError struct{ Code int }

// Error says which code the command exited with.
func (e *ExitError) Error() string { return fmt.Sprintf("command exited with code %d", e.Code) }

// SandboxResult is the result of a command (SPEC §3).
type SandboxResult struct {
	Stdout  string `json:"stdout"`
	Stderr  string `json:"stderr"`
	Outcome struct {
		Type     string `json:"type"`
		ExitCode *int   `json:"exit_code,omitempty"`
	} `json:"outcome"`
	Error *string `json:"error,omitempty"`
}

type envFlag []string

func (e *envFlag) String() string { return strings.Join(*e, ",") }
func (e *envFlag) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("want K=V, got %q", v)
	}
	*e = append(*e, v)
	return nil
}

// RunSandbox runs `conch sandbox …`.
func RunSandbox(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) == 0 {
			fmt.Fprint(stderr, sandboxUsage)
			return Usagef("conch sandbox needs a command")
		}
		fmt.Fprint(stdout, sandboxUsage)
		return nil
	}
	cmd, args := args[0], args[1:]
	usage, ok := sandboxCommands[cmd]
	if !ok {
		return UnknownCommand("conch sandbox", cmd, slices.Sorted(maps.Keys(sandboxCommands)))
	}
	fs := flag.NewFlagSet("conch sandbox "+cmd, flag.ContinueOnError)
	var o Options
	o.AddFlags(fs)
	var user *string
	var persistent *bool
	var timeout, maxOut *int
	var workdir *string
	var env envFlag
	switch cmd {
	case "create":
		user = fs.String("user", "", "end user whose workspace to use")
		persistent = fs.Bool("persistent", false, "use the user's persistent workspace")
	case "exec":
		timeout = fs.Int("timeout", 0, "timeout in seconds, 1-300 (default 60)")
		maxOut = fs.Int("max-output", 0, "characters of output kept (default 4096)")
		workdir = fs.String("workdir", "", "working directory")
		fs.Var(&env, "env", "K=V added to the environment (repeatable)")
	}
	if wantsHelp(args) {
		fmt.Fprint(stdout, usage)
		fmt.Fprintln(stdout, "\nFlags:")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	}
	pos, err := parseFlags(fs, fs.Name(), args)
	var bad *UsageError
	if cmd == "exec" && errors.As(err, &bad) && strings.HasPrefix(bad.Msg, "unknown flag") {
		// Before flags could follow the arguments, ls -la needed no --.
		bad.Msg = strings.TrimSuffix(bad.Msg, ")") + "; a flag of the command goes after --: conch sandbox exec ID -- ls -la)"
	}
	if err != nil {
		return err
	}
	c, err := NewClient(&o)
	if err != nil {
		return err
	}
	switch cmd {
	case "create":
		var out struct {
			ID string `json:"id"`
		}
		if err := c.JSON(ctx, "POST", "/api/v1/sandboxes", map[string]any{"user": *user, "persistent": *persistent}, &out); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, out)
		}
		fmt.Fprintln(stdout, out.ID)
		return nil
	case "exec":
		if len(pos) < 2 {
			return &UsageError{Cmd: "conch sandbox exec", Msg: "want <id> <command...> (see 'conch sandbox exec --help')"}
		}
		body := map[string]any{"command": strings.Join(pos[1:], " "), "timeout_seconds": *timeout, "max_output_length": *maxOut, "workdir": *workdir}
		if len(env) > 0 {
			m := map[string]string{}
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				m[k] = v
			}
			body["env"] = m
		}
		var res SandboxResult
		if err := c.JSON(ctx, "POST", "/api/v1/sandboxes/"+url.PathEscape(pos[0])+"/commands", body, &res); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, res)
		}
		fmt.Fprint(stdout, res.Stdout)
		fmt.Fprint(stderr, res.Stderr)
		switch res.Outcome.Type {
		case "exit":
			if res.Outcome.ExitCode != nil && *res.Outcome.ExitCode != 0 {
				return &ExitError{Code: *res.Outcome.ExitCode}
			}
			return nil
		case "timeout":
			return fmt.Errorf("command %w", ErrTimeout)
		default:
			msg := "sandbox error"
			if res.Error != nil {
				msg = *res.Error
			}
			return fmt.Errorf("%s", msg)
		}
	case "list":
		var out struct {
			Sandboxes []struct {
				ID      string `json:"id"`
				User    string `json:"user"`
				Cwd     string `json:"cwd"`
				State   string `json:"state"`
				Created string `json:"created_at"`
			} `json:"sandboxes"`
		}
		if err := c.JSON(ctx, "GET", "/api/v1/sandboxes", nil, &out); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, out)
		}
		tw := NewTable(stdout, "ID", "STATE", "CWD", "USER", "CREATED")
		for _, s := range out.Sandboxes {
			tw.Row(s.ID, s.State, s.Cwd, s.User, s.Created)
		}
		return tw.Flush()
	case "rm":
		if len(pos) == 0 {
			return &UsageError{Cmd: "conch sandbox rm", Msg: "want <id>... (see 'conch sandbox rm --help')"}
		}
		for _, id := range pos {
			if err := c.JSON(ctx, "DELETE", "/api/v1/sandboxes/"+url.PathEscape(id), nil, nil); err != nil {
				return err
			}
		}
		return nil
	}
	return UnknownCommand("conch sandbox", cmd, slices.Sorted(maps.Keys(sandboxCommands)))
}
