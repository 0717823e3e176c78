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
	"strconv"
	"strings"
)

const sandboxUsage = `usage: conch sandbox <command> [flags]

Commands:
  create [flags]                       create a sandbox and print its id
  exec [flags] <id> [--] <command...>  run a command, printing its output as it comes; its exit code becomes conch's
  attach <id>                          a login shell in the sandbox on this terminal (Ctrl-] detaches)
  watch [-r] <id> [dir]                print each change under a directory (default /home/workspace) as it happens
  expose [flags] <id> <port>           make a port of the sandbox's loopback a URL; print it
  ports <id>                           list a sandbox's exposed ports: port, public or private, expiry, URL
  unexpose <id> <port>                 close an exposed port and its connections
  list [flags]                         list the account's sandboxes: id, state, working directory, user, labels
  rm <id>...                           destroy sandboxes
  snapshot [--name NAME] <id>          save a sandbox's /home/workspace, /tmp and template workdir; print the snapshot's id
  fork [--count N] <id>                copy a running sandbox's files and settings; print the copies' ids
  pause <id>...                        save sandboxes' files and settings and end their processes
  resume <id>...                       bring paused sandboxes back (a command to one does too)

A sandbox made with "create --snapshot ID" starts with a snapshot's files
(not its processes); "conch snapshots" lists and removes snapshots. One
made with "create --template NAME" starts from a template's root
filesystem and settings; "conch templates" makes them from images.
`

var sandboxGroup = &group{
	name:    "sandbox",
	summary: "create sandboxes, run commands in them and remove them",
	usage:   sandboxUsage,
	prose: map[string]string{
		"exec": `Its exit code is 124 when the command timed out. Flags may stand
anywhere before "--"; everything after "--" is the command, so its own
flags need no quoting:

  conch sandbox exec ID --env FOO=bar 'echo $FOO'
  conch sandbox exec ID -- ls -la
`,
	},
	args:  map[string]arity{"attach": {1, 1}, "watch": {1, 2}, "expose": {2, 2}, "ports": {1, 1}, "unexpose": {2, 2}, "exec": {2, -1}, "rm": {1, -1}, "snapshot": {1, 1}, "fork": {1, 1}, "pause": {1, -1}, "resume": {1, -1}},
	flags: func(cmd string) *flag.FlagSet { return new(sandboxFlags).flagSet(cmd) },
}

// sandboxFlags are the values of the flags of a sandbox command.
type sandboxFlags struct {
	Options
	user, workdir, name   string
	snapshot, template    string
	persistent, idlePause bool
	recursive, public     bool
	expires               int
	timeout, maxOutput    int
	count                 int
	ttl, idle             int
	env                   envFlag
	labels                labelFlag
	status                string
}

// flagSet is the flag set of sandbox command cmd, bound to f: what the
// command parses and what its help lists.
func (f *sandboxFlags) flagSet(cmd string) *flag.FlagSet {
	fs := f.newFlagSet("conch sandbox")
	switch cmd {
	case "create":
		fs.StringVar(&f.user, "user", "", "the end `USER` whose workspace the sandbox uses")
		fs.BoolVar(&f.persistent, "persistent", false, "use the user's persistent workspace")
		fs.StringVar(&f.name, "name", "", "a `NAME` returned with it")
		fs.IntVar(&f.ttl, "ttl", 0, "its lifetime in `SECONDS`, busy or not (0: the operator's ceiling)")
		fs.IntVar(&f.idle, "idle-timeout", 0, "idle `SECONDS` after which it ends (0: the operator's ceiling)")
		fs.Var(&f.labels, "label", "a `K=V` label to find it by (repeatable)")
		fs.StringVar(&f.snapshot, "snapshot", "", "start from the files of snapshot `ID`")
		fs.StringVar(&f.template, "template", "", "start from template `NAME` (conch templates)")
		fs.BoolVar(&f.idlePause, "pause-when-idle", false, "pause it at its idle timeout rather than end it")
	case "snapshot":
		fs.StringVar(&f.name, "name", "", "a `NAME` for the snapshot")
	case "fork":
		fs.IntVar(&f.count, "count", 1, "how many copies, 1 to 16")
	case "watch":
		fs.BoolVar(&f.recursive, "r", false, "every directory below it too (at most 4096 in all)")
	case "expose":
		fs.BoolVar(&f.public, "public", false, "a signed URL that needs no key (it expires: an hour by default)")
		fs.IntVar(&f.expires, "expires", 0, "`SECONDS` until it closes, at most a day (0: with the sandbox; a public one, an hour)")
	case "list":
		fs.StringVar(&f.user, "user", "", "only the sandboxes of the end `USER`")
		fs.Var(&f.labels, "label", "only sandboxes labelled `K=V`, or with label K at all (repeatable; all must hold)")
		fs.StringVar(&f.status, "status", "", "only sandboxes in `STATE`: starting, ready, stopping, gone or paused")
	case "exec":
		fs.IntVar(&f.timeout, "timeout", 0, "time limit in `SECONDS`, 1 to 300 (0: the default of 60)")
		fs.IntVar(&f.maxOutput, "max-output", 0, "`CHARS` of output kept (0: the default of 4096)")
		fs.StringVar(&f.workdir, "workdir", "", "working `DIR` of the command")
		fs.Var(&f.env, "env", "`K=V` added to the command's environment (repeatable)")
	}
	return fs
}

// ExitError carries the exit code of a remote command.
type ExitError struct{ Code int }

// Error says which code the command exited with.
func (e *ExitError) Error() string { return fmt.Sprintf("command exited with code %d", e.Code) }

// SandboxResult is the result of a command, as the REST API returns it
// (docs/reference/rest-api.md).
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

// labelFlag is a repeated K=V (or, for a list, K).
type labelFlag []string

func (l *labelFlag) String() string { return strings.Join(*l, ",") }
func (l *labelFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

func (e *envFlag) String() string { return strings.Join(*e, ",") }

// vars are the variables the flags set, K → V.
func (e envFlag) vars() map[string]string {
	m := make(map[string]string, len(e))
	for _, kv := range e {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}
func (e *envFlag) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("want K=V, got %q", v)
	}
	*e = append(*e, v)
	return nil
}

// RunSandbox runs `conch sandbox …`.
func RunSandbox(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var f sandboxFlags
	cmd, pos, err := sandboxGroup.parse(stdout, args, f.flagSet)
	var bad *UsageError
	if errors.As(err, &bad) && bad.Cmd == "conch sandbox exec" && strings.HasPrefix(bad.Msg, "unknown flag") {
		// Before flags could follow the arguments, ls -la needed no --.
		bad.Msg = strings.TrimSuffix(bad.Msg, ")") + "; a flag of the command goes after --: conch sandbox exec ID -- ls -la)"
	}
	if err != nil {
		return err
	}
	o := &f.Options
	c, err := NewClient(o)
	if err != nil {
		return err
	}
	switch cmd {
	case "create":
		var out struct {
			ID string `json:"id"`
		}
		body := map[string]any{"user": f.user, "persistent": f.persistent, "name": f.name, "ttl_seconds": f.ttl, "idle_timeout_seconds": f.idle, "snapshot": f.snapshot, "pause_when_idle": f.idlePause, "template": f.template}
		if len(f.labels) > 0 {
			m := map[string]string{}
			for _, kv := range f.labels {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return &UsageError{Cmd: "conch sandbox create", Msg: fmt.Sprintf("--label: want K=V, got %q (see 'conch sandbox create --help')", kv)}
				}
				m[k] = v
			}
			body["labels"] = m
		}
		if err := c.JSON(ctx, "POST", "/api/v1/sandboxes", body, &out); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, out)
		}
		fmt.Fprintln(stdout, out.ID)
		return nil
	case "attach":
		return attach(ctx, c, pos[0], stdin, stdout, stderr)
	case "expose", "ports", "unexpose":
		return ports(ctx, c, cmd, pos, &f, o.JSON(), stdout)
	case "watch":
		q := url.Values{"recursive": {strconv.FormatBool(f.recursive)}}
		if len(pos) > 1 {
			q.Set("path", pos[1])
		}
		return watchFiles(ctx, c, "/api/v1/sandboxes/"+url.PathEscape(pos[0])+"/watch?"+q.Encode(), o.JSON(), stdout, stderr)
	case "exec":
		body := map[string]any{"command": strings.Join(pos[1:], " "), "timeout_seconds": f.timeout, "max_output_length": f.maxOutput, "workdir": f.workdir}
		if len(f.env) > 0 {
			body["env"] = f.env.vars()
		}
		path := "/api/v1/sandboxes/" + url.PathEscape(pos[0]) + "/commands"
		if !o.JSON() {
			// Output is printed as it comes.
			body["stream"] = true
			return streamCommand(ctx, c, path, body, stdout, stderr)
		}
		var res SandboxResult
		if err := c.JSON(ctx, "POST", path, body, &res); err != nil {
			return err
		}
		return PrintJSON(stdout, res)
	case "list":
		var out struct {
			Sandboxes []struct {
				ID      string            `json:"id"`
				User    string            `json:"user"`
				Cwd     string            `json:"cwd"`
				State   string            `json:"state"`
				Created string            `json:"created_at"`
				Labels  map[string]string `json:"labels"`
			} `json:"sandboxes"`
		}
		q := url.Values{}
		for _, l := range f.labels {
			q.Add("label", l)
		}
		for k, v := range map[string]string{"user": f.user, "status": f.status} {
			if v != "" {
				q.Set(k, v)
			}
		}
		path := "/api/v1/sandboxes"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		if err := c.JSON(ctx, "GET", path, nil, &out); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, out)
		}
		tw := NewTable(stdout, "ID", "STATE", "CWD", "USER", "CREATED", "LABELS")
		for _, s := range out.Sandboxes {
			labels := make([]string, 0, len(s.Labels))
			for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
				labels = append(labels, k+"="+s.Labels[k])
			}
			tw.Row(s.ID, s.State, s.Cwd, s.User, s.Created, strings.Join(labels, ","))
		}
		return tw.Flush()
	case "rm":
		for _, id := range pos {
			if err := c.JSON(ctx, "DELETE", "/api/v1/sandboxes/"+url.PathEscape(id), nil, nil); err != nil {
				return err
			}
		}
		return nil
	case "snapshot":
		var out Snapshot
		if err := c.JSON(ctx, "POST", "/api/v1/sandboxes/"+url.PathEscape(pos[0])+":snapshot", map[string]any{"name": f.name}, &out); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, out)
		}
		fmt.Fprintln(stdout, out.ID)
		return nil
	case "pause", "resume":
		for _, id := range pos {
			if err := c.JSON(ctx, "POST", "/api/v1/sandboxes/"+url.PathEscape(id)+":"+cmd, map[string]any{}, nil); err != nil {
				return err
			}
		}
		return nil
	case "fork":
		var out struct {
			Sandboxes []struct {
				ID string `json:"id"`
			} `json:"sandboxes"`
		}
		if err := c.JSON(ctx, "POST", "/api/v1/sandboxes/"+url.PathEscape(pos[0])+":fork", map[string]any{"count": f.count}, &out); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, out)
		}
		for _, sb := range out.Sandboxes {
			fmt.Fprintln(stdout, sb.ID)
		}
		return nil
	}
	return UnknownCommand("conch sandbox", cmd, sandboxGroup.next(""))
}
