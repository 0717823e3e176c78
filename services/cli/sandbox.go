package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
)

const sandboxUsage = `usage: conch sandbox <command> [flags]

Commands:
  create [--user U] [--persistent]     create a sandbox and print its id
  exec [flags] <id> <command...>       run a command; its output and exit code become ours
  list                                 list the account's sandboxes
  rm <id>...                           destroy sandboxes

exec flags: --timeout seconds, --max-output characters, --workdir dir, --env K=V (repeatable)
`

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
	help := args
	if len(args) > 0 && args[0] == "exec" {
		// The words after the sandbox id are the remote command's own.
		for i, a := range args[1:] {
			if !strings.HasPrefix(a, "-") {
				help = args[:i+1]
				break
			}
		}
	}
	if wantsHelp(help) {
		fmt.Fprint(stdout, sandboxUsage)
		return nil
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, sandboxUsage)
		return Usagef("conch sandbox needs a command")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("conch sandbox "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	o.AddFlags(fs)
	user := fs.String("user", "", "end user whose workspace to use (create)")
	persistent := fs.Bool("persistent", false, "use the user's persistent workspace (create)")
	timeout := fs.Int("timeout", 0, "timeout in seconds, 1-300 (exec; default 60)")
	maxOut := fs.Int("max-output", 0, "characters of output kept (exec; default 4096)")
	workdir := fs.String("workdir", "", "working directory (exec)")
	var env envFlag
	fs.Var(&env, "env", "K=V added to the environment (exec, repeatable)")
	if err := fs.Parse(args); err != nil {
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
		if fs.NArg() < 2 {
			return Usagef("conch sandbox exec <id> <command...>")
		}
		body := map[string]any{"command": strings.Join(fs.Args()[1:], " "), "timeout_seconds": *timeout, "max_output_length": *maxOut, "workdir": *workdir}
		if len(env) > 0 {
			m := map[string]string{}
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				m[k] = v
			}
			body["env"] = m
		}
		var res SandboxResult
		if err := c.JSON(ctx, "POST", "/api/v1/sandboxes/"+url.PathEscape(fs.Arg(0))+"/commands", body, &res); err != nil {
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
			return fmt.Errorf("command timed out")
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
		for _, s := range out.Sandboxes {
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\n", s.ID, s.State, s.Cwd, s.User)
		}
		return nil
	case "rm":
		if fs.NArg() == 0 {
			return Usagef("conch sandbox rm <id>...")
		}
		for _, id := range fs.Args() {
			if err := c.JSON(ctx, "DELETE", "/api/v1/sandboxes/"+url.PathEscape(id), nil, nil); err != nil {
				return err
			}
		}
		return nil
	default:
		fmt.Fprint(stderr, sandboxUsage)
		return Usagef("unknown sandbox command %q", cmd)
	}
}
