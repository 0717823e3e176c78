// Command docgen writes the references generated from conch's code
// (`make gen`) into a directory, docs/reference: configuration.md, for
// every command of launch.Commands each flag, environment variable, type,
// default and usage, read through config.Fields from the very tags
// config.Load reads; and cli.md, the help the CLI prints for conch and
// every client command, whose flags are listed from the flag sets the
// commands parse.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	if err := realMain(os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "docgen:", err)
		}
		os.Exit(2)
	}
}

// references are the files docgen writes, by name, each with its
// generator.
var references = []struct {
	name string
	gen  func() ([]byte, error)
}{
	{"configuration.md", configurationReference},
	{"cli.md", cliReference},
}

func realMain(args []string) error {
	fs := flag.NewFlagSet("docgen", flag.ContinueOnError)
	dir := fs.String("dir", "", "write every reference into this `directory` (make gen: docs/reference)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *dir == "" {
		return errors.New("-dir is required")
	}
	for _, r := range references {
		ref, err := r.gen()
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		if err := os.WriteFile(filepath.Join(*dir, r.name), ref, 0o644); err != nil {
			return err
		}
	}
	return nil
}
