// Command docgen writes the generated reference of conch's settings,
// docs/reference/configuration.md (`make gen`): for every command of
// launch.Commands, each flag, environment variable, type, default and
// usage, read through config.Fields from the very tags config.Load reads.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := realMain(os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "docgen:", err)
		}
		os.Exit(2)
	}
}

func realMain(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("docgen", flag.ContinueOnError)
	out := fs.String("o", "", "write the reference to this `file` (default: stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	ref, err := configurationReference()
	if err != nil {
		return err
	}
	if *out == "" {
		_, err := stdout.Write(ref)
		return err
	}
	return os.WriteFile(*out, ref, 0o644)
}
