package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/conch-sh/conch/services/internal/display"
)

const approvalsUsage = `usage: conch approvals <command> [flags]

Commands:
  list [--state pending|allowed|denied|expired|all] [--agent NAME]
                                 list approvals (default: pending)
  approve ID [--session|--always]
                                 allow a pending command once (or for its session, or always)
  deny ID                        deny a pending command
  allowlist list AGENT           show an agent's allowlist
  allowlist add AGENT PATTERN    add a glob on the resolved binary path
  allowlist rm AGENT ID|PATTERN  remove an allowlist entry
  export [FILE]                  write the exec-approvals document (default: stdout)
  import FILE|-                  replace the exec-approvals document
  replay [FILE|-] [--since 7d] [--until T] [--agent NAME] [--exec SETTINGS.json]
                                 judge the audited commands again under a proposed document
                                 (and/or gateway exec settings) and show what would change
`

// apiApproval is an approval as the REST API returns it.
type apiApproval struct {
	ID            string   `json:"id"`
	State         string   `json:"state"`
	Decision      string   `json:"decision"`
	Command       string   `json:"command"`
	Cwd           string   `json:"cwd"`
	Agent         string   `json:"agent"`
	ResolvedPaths []string `json:"resolved_paths"`
	Host          string   `json:"host"`
	Security      string   `json:"security"`
	Session       string   `json:"session"`
	CreatedAt     string   `json:"created_at"`
	ExpiresAt     string   `json:"expires_at"`
	ResolvedBy    string   `json:"resolved_by"`
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
	if wantsHelp(args) {
		printHelp(stdout, "conch approvals", approvalsUsage, args)
		return nil
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, approvalsUsage)
		return ErrUsage
	}
	cmd, args := args[0], args[1:]
	if !slices.Contains(commandNames(approvalsUsage), cmd) {
		return UnknownCommand("conch approvals", cmd, commandNames(approvalsUsage))
	}
	if cmd == "allowlist" && len(args) > 0 {
		if sub := args[0]; !slices.Contains([]string{"list", "add", "rm"}, sub) {
			return UnknownCommand("conch approvals allowlist", sub, []string{"list", "add", "rm"})
		}
		cmd, args = "allowlist "+args[0], args[1:]
	}
	fs := flag.NewFlagSet("conch approvals "+cmd, flag.ContinueOnError)
	var o Options
	o.AddFlags(fs)
	state := fs.String("state", "pending", "list: state to show, or all")
	agent := fs.String("agent", "", "list: only this agent")
	always := fs.Bool("always", false, "approve: allow always (adds the binaries to the allowlist)")
	since := fs.String("since", "7d", "replay: oldest command, a duration back (7d, 12h) or RFC 3339")
	until := fs.String("until", "", "replay: newest command (default: now)")
	execFile := fs.String("exec", "", "replay: proposed gateway exec settings, a JSON file")
	session := fs.Bool("session", false, "approve: allow for the rest of the approval's session (the same commands run again there without asking)")
	// Flags may come before or after the positional arguments.
	pos, err := parseFlags(fs, fs.Name(), args)
	if err != nil {
		return err
	}
	need := func(n int, what string) error {
		if len(pos) != n {
			return Usagef("conch approvals %s %s", cmd, what)
		}
		return nil
	}
	c, err := NewClient(&o)
	if err != nil {
		return err
	}
	switch cmd {
	case "replay":
		if len(pos) > 1 || len(pos) == 0 && *execFile == "" {
			return Usagef("conch approvals replay [FILE|-] [--since 7d] [--agent A] [--exec SETTINGS.json]: give a document, settings or both")
		}
		return replayPolicy(ctx, c, &o, pos, replayFlags{since: *since, until: *until, agent: *agent, exec: *execFile}, stdout)
	case "list":
		if err := need(0, "[--state S] [--agent A]"); err != nil {
			return err
		}
		return listApprovals(ctx, c, &o, *state, *agent, stdout)
	case "approve", "deny":
		if err := need(1, "ID"); err != nil {
			return err
		}
		decision := "deny"
		if cmd == "approve" {
			decision = "allow-once"
			switch {
			case *always && *session:
				return Usagef("--always and --session are two different answers; give one")
			case *always:
				decision = "allow-always"
			case *session:
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
		if err := need(1, "AGENT"); err != nil {
			return err
		}
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
		if err := need(2, "AGENT PATTERN"); err != nil {
			return err
		}
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
		if err := need(2, "AGENT ID|PATTERN"); err != nil {
			return err
		}
		if err := c.JSON(ctx, "DELETE", "/api/v1/exec-approvals/agents/"+url.PathEscape(pos[0])+"/allowlist/"+url.PathEscape(pos[1]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %s\n", pos[1])
		return nil
	case "export":
		if len(pos) > 1 {
			return Usagef("conch approvals export [FILE]")
		}
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
		if err := need(1, "FILE|-"); err != nil {
			return err
		}
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
	return UnknownCommand("conch approvals", cmd, commandNames(approvalsUsage))
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
