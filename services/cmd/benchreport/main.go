// Command benchreport reads the output of `go test -bench` from the files
// it is given, or stdin, and prints conch's benchmark report: one table of
// metrics against their floors and targets (`make bench`).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/conch-sh/conch/services/internal/benchreport"
)

func main() {
	if err := realMain(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
		}
		os.Exit(2)
	}
}

func realMain(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("benchreport", flag.ContinueOnError)
	jsonPath := fs.String("json", "", "also write the report as JSON to this `file`")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: benchreport [-json file] [go-test-output ...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	in := stdin
	if fs.NArg() > 0 {
		var readers []io.Reader
		for _, name := range fs.Args() {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			readers = append(readers, f)
		}
		in = io.MultiReader(readers...)
	}
	out, err := benchreport.Parse(in)
	if err != nil {
		return err
	}
	rep, err := benchreport.Evaluate(out, benchreport.Rows)
	if err != nil {
		return err
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if *jsonPath == "" {
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(*jsonPath, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
