package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
)

const snapshotsUsage = `usage: conch snapshots <command> [flags]

Commands:
  list        list the account's snapshots, newest first
  rm <id>...  delete snapshots

"conch sandbox snapshot ID" takes one; "conch sandbox create --snapshot
SNAPSHOT" starts a sandbox from one.
`

var snapshotsGroup = &group{
	name:    "snapshots",
	summary: "list and delete sandbox snapshots",
	usage:   snapshotsUsage,
	args:    map[string]arity{"rm": {1, -1}},
	flags:   func(string) *flag.FlagSet { return new(Options).newFlagSet("conch snapshots") },
}

// Snapshot is a snapshot as the REST API returns it
// (docs/reference/sandboxes.md).
type Snapshot struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	SandboxID string `json:"sandbox_id"`
	SizeBytes int64  `json:"size_bytes"`
	CreatedAt string `json:"created_at"`
}

// Snapshots runs `conch snapshots ...`.
func Snapshots(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var opts Options
	cmd, pos, err := snapshotsGroup.parse(stdout, args, func(string) *flag.FlagSet { return opts.newFlagSet("conch snapshots") })
	if err != nil {
		return err
	}
	c, err := NewClient(&opts)
	if err != nil {
		return err
	}
	switch cmd {
	case "list":
		var out struct {
			Snapshots []Snapshot `json:"snapshots"`
		}
		if err := c.JSON(ctx, "GET", "/api/v1/snapshots", nil, &out); err != nil {
			return err
		}
		if opts.JSON() {
			return PrintJSON(stdout, out)
		}
		tw := NewTable(stdout, "ID", "NAME", "SANDBOX", "SIZE", "CREATED")
		for _, s := range out.Snapshots {
			tw.Row(s.ID, s.Name, s.SandboxID, fmt.Sprint(s.SizeBytes), s.CreatedAt)
		}
		return tw.Flush()
	case "rm":
		for _, id := range pos {
			if err := c.JSON(ctx, "DELETE", "/api/v1/snapshots/"+url.PathEscape(id), nil, nil); err != nil {
				return err
			}
		}
		return nil
	}
	return UnknownCommand("conch snapshots", cmd, snapshotsGroup.next(""))
}
