package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"
)

const nodesUsage = `usage: conch nodes <command> [flags]

Commands:
  list          list the account's paired nodes and whether they are connected
  create NAME   pair a node; prints the token for "conch node --token" once
  rm NAME       unpair a node: its token stops working and it is disconnected

On the machine to pair, run:
  conch node --join <router URL> --name NAME --token TOKEN [--workdir DIR]
`

var nodesGroup = &group{
	name:    "nodes",
	summary: "pair, list and unpair nodes (machines that run exec host node commands)",
	usage:   nodesUsage,
	args:    map[string]arity{"create": {1, 1}, "rm": {1, 1}},
	flags:   func(string) *flag.FlagSet { return new(Options).newFlagSet("conch nodes") },
}

// Nodes runs `conch nodes ...`.
func Nodes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var opts Options
	cmd, pos, err := nodesGroup.parse(stdout, args, func(string) *flag.FlagSet { return opts.newFlagSet("conch nodes") })
	if err != nil {
		return err
	}
	c, err := NewClient(&opts)
	if err != nil {
		return err
	}
	name := ""
	if len(pos) > 0 {
		name = pos[0]
	}
	switch cmd {
	case "list":
		var out struct {
			Nodes []struct {
				Name      string `json:"name"`
				Connected bool   `json:"connected"`
				Platform  string `json:"platform"`
				Executor  string `json:"executor"`
			} `json:"nodes"`
		}
		if err := c.JSON(ctx, "GET", "/api/v1/nodes", nil, &out); err != nil {
			return err
		}
		if opts.JSON() {
			return PrintJSON(stdout, out)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tCONNECTED\tPLATFORM\tEXECUTOR")
		for _, n := range out.Nodes {
			fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", n.Name, n.Connected, n.Platform, n.Executor)
		}
		return tw.Flush()
	case "create":
		var out struct {
			Token string `json:"token"`
		}
		if err := c.JSON(ctx, "POST", "/api/v1/nodes", map[string]string{"name": name}, &out); err != nil {
			return err
		}
		if opts.JSON() {
			return PrintJSON(stdout, out)
		}
		fmt.Fprintf(stdout, "node %s paired; its token (shown once):\n%s\n", name, out.Token)
		return nil
	case "rm":
		if err := c.JSON(ctx, "DELETE", "/api/v1/nodes/"+url.PathEscape(name), nil, nil); err != nil {
			return err
		}
		if !opts.JSON() {
			fmt.Fprintf(stdout, "node %s unpaired\n", name)
		}
		return nil
	}
	return UnknownCommand("conch nodes", cmd, nodesGroup.next(""))
}
