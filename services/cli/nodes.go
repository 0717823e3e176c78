package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
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

// Nodes runs `conch nodes ...`.
func Nodes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if wantsHelp(args) {
		printHelp(stdout, "conch nodes", nodesUsage, args)
		return nil
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, nodesUsage)
		return Usagef("conch nodes needs a command")
	}
	cmd, args := args[0], args[1:]
	if !slices.Contains(commandNames(nodesUsage), cmd) {
		return UnknownCommand("conch nodes", cmd, commandNames(nodesUsage))
	}
	fs := flag.NewFlagSet("conch nodes "+cmd, flag.ContinueOnError)
	var opts Options
	opts.AddFlags(fs)
	name, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if cmd != "list" && name == "" {
		return Usagef("conch nodes %s needs a node NAME", cmd)
	}
	c, err := NewClient(&opts)
	if err != nil {
		return err
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
	default:
		return UnknownCommand("conch nodes", cmd, commandNames(nodesUsage))
	}
}
