package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/conch-sh/conch/services/internal/display"
)

const approvalsUsage = `usage: conch approvals <command> [flags]

Commands:
  list [--state STATE] [--agent NAME]
                                 list approvals (default: pending)
  show ID                        show an approval whole, with its preview
  approve ID [--session|--always]
                                 allow a pending command once (or for its session, or always)
  deny ID                        deny a pending command
  allowlist list AGENT           show an agent's allowlist
  allowlist add AGENT PATTERN    add a glob on the resolved binary path
  allowlist rm AGENT ID|PATTERN  remove an allowlist entry
  export [FILE]                  write the exec-approvals document (default: stdout)
  import FILE|-                  replace the exec-approvals document
  replay [FILE|-] [flags]        judge the audited commands again under a proposed document
                                 (and/or gateway exec settings) and show what would change
`

var approvalsGroup = &group{
	name:    "approvals",
	summary: "list and answer exec approvals, edit allowlists, export/import the document",
	usage:   approvalsUsage,
	args: map[string]arity{
		"approve": {1, 1}, "deny": {1, 1}, "show": {1, 1},
		"allowlist list": {1, 1}, "allowlist add": {2, 2}, "allowlist rm": {2, 2},
		"export": {0, 1}, "import": {1, 1}, "replay": {0, 1},
	},
	flags: func(cmd string) *flag.FlagSet { return new(approvalsFlags).flagSet(cmd) },
}

// approvalsFlags are the values of the flags of an approvals command.
type approvalsFlags struct {
	Options
	state, agent, since, until, exec string
	session, always                  bool
}

// flagSet is the flag set of approvals command cmd, bound to f: what the
// command parses and what its help lists.
func (f *approvalsFlags) flagSet(cmd string) *flag.FlagSet {
	fs := f.newFlagSet("conch approvals")
	switch cmd {
	case "list":
		fs.StringVar(&f.state, "state", "pending", "list the approvals in `STATE`: pending, allowed, denied, expired or all")
		fs.StringVar(&f.agent, "agent", "", "list only the approvals of the agent (gateway) `NAME`")
	case "approve":
		fs.BoolVar(&f.session, "session", false, "allow for the rest of the approval's session: the same commands run again there without asking")
		fs.BoolVar(&f.always, "always", false, "allow always: the command's binaries are added to the agent's allowlist")
	case "replay":
		fs.StringVar(&f.since, "since", "7d", "oldest command judged again: a duration back from now (7d, 12h) or an RFC 3339 `TIME`")
		fs.StringVar(&f.until, "until", "", "newest command judged again: a `TIME` as --since takes (default: now)")
		fs.StringVar(&f.agent, "agent", "", "judge only the commands of the gateway `NAME`")
		fs.StringVar(&f.exec, "exec", "", "judge under the proposed gateway exec settings of the JSON `FILE` too")
	}
	return fs
}

// apiApproval is an approval as the REST API returns it.
type apiApproval struct {
	ID            string      `json:"id"`
	State         string      `json:"state"`
	Decision      string      `json:"decision"`
	Command       string      `json:"command"`
	Cwd           string      `json:"cwd"`
	Agent         string      `json:"agent"`
	ResolvedPaths []string    `json:"resolved_paths"`
	Host          string      `json:"host"`
	Security      string      `json:"security"`
	Session       string      `json:"session"`
	CreatedAt     string      `json:"created_at"`
	ExpiresAt     string      `json:"expires_at"`
	ResolvedBy    string      `json:"resolved_by"`
	Preview       *apiPreview `json:"preview"`
}

// apiPreview is an approval's preview as the REST API returns it.
type apiPreview struct {
	ExitCode int    `json:"exit_code"`
	TimedOut bool   `json:"timed_out"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Changes  []struct {
		Path      string `json:"path"`
		Change    string `json:"change"`
		SizeBytes int64  `json:"size_bytes"`
	} `json:"changes"`
	ChangesOmitted int    `json:"changes_omitted"`
	Error          string `json:"error"`
}

// lines is the preview as every surface shows it, or nothing for none.
func (p *apiPreview) lines() []string {
	if p == nil {
		return nil
	}
	d := &display.Preview{ExitCode: p.ExitCode, TimedOut: p.TimedOut, Stdout: p.Stdout, Stderr: p.Stderr, ChangesOmitted: p.ChangesOmitted, Error: p.Error}
	for _, c := range p.Changes {
		d.Changes = append(d.Changes, display.PreviewChange{Path: c.Path, Change: c.Change, SizeBytes: c.SizeBytes})
	}
	return d.Lines()
}

type apiEntry struct {
	ID               string `json:"id"`
	Pattern          string `json:"pattern"`
	LastUsedAt       int64  `json:"last_used_at"`
	LastUsedCommand  string `json:"last_used_command"`
	LastResolvedPath string `json:"last_resolved_path"`
}

// Approvals runs `conch approvals …`.
func Approvals(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f approvalsFlags
	cmd, pos, err := approvalsGroup.parse(stdout, args, f.flagSet)
	if err != nil {
		return err
	}
	o := &f.Options
	c, err := NewClient(o)
	if err != nil {
		return err
	}
	switch cmd {
	case "replay":
		if len(pos) == 0 && f.exec == "" {
			return &UsageError{Cmd: "conch approvals replay", Msg: "give a document FILE, --exec FILE or both (see 'conch approvals replay --help')"}
		}
		return replayPolicy(ctx, c, o, pos, replayFlags{since: f.since, until: f.until, agent: f.agent, exec: f.exec}, stdout)
	case "list":
		return listApprovals(ctx, c, o, f.state, f.agent, stdout)
	case "show":
		var a apiApproval
		if err := c.JSON(ctx, "GET", "/api/v1/approvals/"+url.PathEscape(pos[0]), nil, &a); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, a)
		}
		// Escaped as on every surface that asks a human.
		fmt.Fprintf(stdout, "approval %s: %s\ncommand: %s\ncwd: %s\nagent: %s\nhost: %s, security %s\nruns: %s\n",
			display.Escape(a.ID), a.State, display.Escape(a.Command), display.Escape(a.Cwd), display.Escape(a.Agent), a.Host, a.Security,
			display.Escape(strings.Join(a.ResolvedPaths, ", ")))
		for _, l := range a.Preview.lines() {
			fmt.Fprintln(stdout, l)
		}
		return nil
	case "approve", "deny":
		decision := "deny"
		if cmd == "approve" {
			decision = "allow-once"
			switch {
			case f.always && f.session:
				return &UsageError{Cmd: "conch approvals approve", Msg: "--always and --session are two different answers; give one"}
			case f.always:
				decision = "allow-always"
			case f.session:
				decision = "allow-session"
			}
		}
		var a apiApproval
		if err := c.JSON(ctx, "POST", "/api/v1/approvals/"+url.PathEscape(pos[0])+":resolve", map[string]string{"decision": decision}, &a); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, a)
		}
		fmt.Fprintf(stdout, "approval %s: %s (%s)\n", display.Escape(a.ID), a.State, a.Decision)
		return nil
	case "allowlist list":
		var out struct {
			Entries []apiEntry `json:"entries"`
		}
		if err := c.JSON(ctx, "GET", "/api/v1/exec-approvals/agents/"+url.PathEscape(pos[0])+"/allowlist", nil, &out); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, out)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tPATTERN\tLAST RESOLVED PATH\tLAST COMMAND")
		for _, e := range out.Entries {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.ID, display.Escape(e.Pattern), display.Escape(e.LastResolvedPath), display.Escape(e.LastUsedCommand))
		}
		return tw.Flush()
	case "allowlist add":
		var e apiEntry
		if err := c.JSON(ctx, "POST", "/api/v1/exec-approvals/agents/"+url.PathEscape(pos[0])+"/allowlist", map[string]string{"pattern": pos[1]}, &e); err != nil {
			return err
		}
		if o.JSON() {
			return PrintJSON(stdout, e)
		}
		fmt.Fprintf(stdout, "added %s (%s)\n", display.Escape(e.Pattern), e.ID)
		return nil
	case "allowlist rm":
		if err := c.JSON(ctx, "DELETE", "/api/v1/exec-approvals/agents/"+url.PathEscape(pos[0])+"/allowlist/"+url.PathEscape(pos[1]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %s\n", pos[1])
		return nil
	case "export":
		req, err := c.Request(ctx, "GET", "/api/v1/exec-approvals", nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if len(pos) == 1 {
			return os.WriteFile(pos[0], b, 0o600)
		}
		_, err = stdout.Write(b)
		return err
	case "import":
		var b []byte
		if pos[0] == "-" {
			b, err = io.ReadAll(io.LimitReader(os.Stdin, 2<<20))
		} else {
			b, err = os.ReadFile(pos[0])
		}
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		req, err := c.Request(ctx, "PUT", "/api/v1/exec-approvals", bytes.NewReader(b))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		fmt.Fprintln(stdout, "imported the exec-approvals document")
		return nil
	}
	return UnknownCommand("conch approvals", cmd, approvalsGroup.next(""))
}

func listApprovals(ctx context.Context, c *Client, o *Options, state, agent string, stdout io.Writer) error {
	q := url.Values{}
	if state != "all" {
		q.Set("state", state)
	}
	if agent != "" {
		q.Set("agent", agent)
	}
	var out struct {
		Approvals []apiApproval `json:"approvals"`
	}
	if err := c.JSON(ctx, "GET", "/api/v1/approvals?"+q.Encode(), nil, &out); err != nil {
		return err
	}
	if o.JSON() {
		return PrintJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tAGENT\tHOST\tRESOLVED\tCOMMAND")
	for _, a := range out.Approvals {
		// The command is written whole and escaped: what is shown is what
		// would run.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.State, display.Escape(a.Agent), a.Host,
			display.Escape(strings.Join(a.ResolvedPaths, ",")), display.Escape(a.Command))
	}
	return tw.Flush()
}
