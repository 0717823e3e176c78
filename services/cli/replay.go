package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/conch-sh/conch/services/internal/display"
)

type replayFlags struct {
	since, until, agent, exec string
}

// replayPolicy runs `conch approvals replay`.
func replayPolicy(ctx context.Context, c *Client, o *Options, pos []string, f replayFlags, stdout io.Writer) error {
	body := map[string]any{}
	read := func(name string) (json.RawMessage, error) {
		var b []byte
		var err error
		if name == "-" {
			b, err = io.ReadAll(io.LimitReader(os.Stdin, 2<<20))
		} else {
			b, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		if !json.Valid(b) {
			return nil, fmt.Errorf("replay: %s is not JSON", name)
		}
		return b, nil
	}
	if len(pos) == 1 {
		doc, err := read(pos[0])
		if err != nil {
			return err
		}
		body["document"] = doc
	}
	if f.exec != "" {
		ex, err := read(f.exec)
		if err != nil {
			return err
		}
		body["gateway_exec"] = ex
	}
	now := time.Now()
	for name, v := range map[string]string{"since": f.since, "until": f.until} {
		if v == "" {
			continue
		}
		t, err := ParseSince(v, now)
		if err != nil {
			return Usagef("--%s: %v", name, err)
		}
		body[name] = t.UTC().Format(time.RFC3339Nano)
	}
	if f.agent != "" {
		body["gateway"] = f.agent
	}
	var out struct {
		Commands int `json:"commands"`
		Changed  int `json:"changed"`
		Changes  []struct {
			From    string `json:"from"`
			To      string `json:"to"`
			Program string `json:"program,omitempty"`
			Count   int    `json:"count"`
		} `json:"changes"`
		Programs []struct {
			From    string `json:"from"`
			To      string `json:"to"`
			Program string `json:"program,omitempty"`
			Count   int    `json:"count"`
		} `json:"programs"`
		Examples []struct {
			Time    time.Time `json:"time"`
			Gateway string    `json:"gateway"`
			User    string    `json:"user,omitempty"`
			Command string    `json:"command"`
			From    string    `json:"from"`
			To      string    `json:"to"`
			Reason  string    `json:"reason"`
		} `json:"examples"`
	}
	if err := c.JSON(ctx, "POST", "/api/v1/exec-policy:replay", body, &out); err != nil {
		return err
	}
	if o.JSON() {
		return PrintJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "%d commands judged again, %d would change\n", out.Commands, out.Changed)
	if out.Changed == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nCHANGE\tCOMMANDS")
	for _, ch := range out.Changes {
		fmt.Fprintf(tw, "%s → %s\t%d\n", ch.From, ch.To, ch.Count)
	}
	fmt.Fprintln(tw, "\nPROGRAM\tCHANGE\tCOMMANDS")
	for _, ch := range out.Programs {
		fmt.Fprintf(tw, "%s\t%s → %s\t%d\n", display.Escape(ch.Program), ch.From, ch.To, ch.Count)
	}
	fmt.Fprintln(tw, "\nTIME\tGATEWAY\tCHANGE\tCOMMAND\tREASON")
	for _, e := range out.Examples {
		fmt.Fprintf(tw, "%s\t%s\t%s → %s\t%s\t%s\n", FormatTime(e.Time), display.Escape(e.Gateway), e.From, e.To, display.Escape(abbrev(e.Command, 60)), display.Escape(abbrev(e.Reason, 60)))
	}
	return tw.Flush()
}
