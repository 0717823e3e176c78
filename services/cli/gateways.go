package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"text/tabwriter"
)

const gatewaysUsage = `usage: conch gateways <command> [flags]

Commands:
  list                      list the account's gateways
  get NAME                  show a gateway (secrets are never shown)
  create NAME [flags]       create a gateway
  update NAME [flags]       replace a gateway (secrets left out are kept)
  rm NAME                   delete a gateway

Flags of create and update:
  -f FILE         the gateway as JSON (SPEC §4 fields; - for stdin)
  --provider P    upstream provider: openai, anthropic or scripted
  --model M       upstream model
  --base-url U    upstream base URL
  --api-key-env V read the upstream API key from environment variable V
  --shell         offer the shell tool even when requests do not ask for it
`

// Gateways runs `conch gateways ...`.
func Gateways(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if wantsHelp(args) {
		fmt.Fprint(stdout, gatewaysUsage)
		return nil
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, gatewaysUsage)
		return Usagef("conch gateways needs a command")
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("conch gateways "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, gatewaysUsage) }
	var opts Options
	opts.AddFlags(fs)
	var file, provider, model, baseURL, keyEnv string
	var shell bool
	if cmd == "create" || cmd == "update" {
		fs.StringVar(&file, "f", "", "gateway JSON file (- for stdin)")
		fs.StringVar(&provider, "provider", "", "upstream provider")
		fs.StringVar(&model, "model", "", "upstream model")
		fs.StringVar(&baseURL, "base-url", "", "upstream base URL")
		fs.StringVar(&keyEnv, "api-key-env", "", "environment variable holding the upstream API key")
		fs.BoolVar(&shell, "shell", false, "offer the shell tool by default")
	}
	name, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	c, err := NewClient(&opts)
	if err != nil {
		return err
	}
	needName := cmd != "list"
	if needName && name == "" {
		return Usagef("conch gateways %s needs a gateway NAME", cmd)
	}
	path := "/api/v1/gateways"
	if name != "" {
		path += "/" + url.PathEscape(name)
	}

	switch cmd {
	case "list":
		var out struct {
			Gateways []map[string]any `json:"gateways"`
		}
		if err := c.JSON(ctx, "GET", "/api/v1/gateways", nil, &out); err != nil {
			return err
		}
		if opts.JSON() {
			return PrintJSON(stdout, out)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tPROVIDER\tMODEL\tSHELL")
		for _, g := range out.Gateways {
			up, _ := g["upstream"].(map[string]any)
			sh, _ := g["shell"].(map[string]any)
			fmt.Fprintf(tw, "%v\t%v\t%v\t%v\n", g["name"], up["provider"], up["model"], sh["enabled"] == true)
		}
		return tw.Flush()
	case "get":
		var g map[string]any
		if err := c.JSON(ctx, "GET", path, nil, &g); err != nil {
			return err
		}
		return PrintJSON(stdout, g)
	case "create", "update":
		g := map[string]any{}
		if file != "" {
			if err := readJSONFile(file, &g); err != nil {
				return err
			}
		}
		g["name"] = name
		up, _ := g["upstream"].(map[string]any)
		if up == nil {
			up = map[string]any{}
		}
		for k, v := range map[string]string{"provider": provider, "model": model, "base_url": baseURL} {
			if v != "" {
				up[k] = v
			}
		}
		if keyEnv != "" {
			key, ok := os.LookupEnv(keyEnv)
			if !ok || key == "" {
				return fmt.Errorf("--api-key-env: %s is not set", keyEnv)
			}
			up["api_key"] = key
		}
		g["upstream"] = up
		if shell {
			sh, _ := g["shell"].(map[string]any)
			if sh == nil {
				sh = map[string]any{}
			}
			sh["enabled"] = true
			g["shell"] = sh
		}
		method, target := "POST", "/api/v1/gateways"
		if cmd == "update" {
			method, target = "PUT", path
		}
		var out map[string]any
		if err := c.JSON(ctx, method, target, g, &out); err != nil {
			return err
		}
		if opts.JSON() {
			return PrintJSON(stdout, out)
		}
		fmt.Fprintf(stdout, "gateway %s %sd\n", name, cmd)
		return nil
	case "rm":
		if err := c.JSON(ctx, "DELETE", path, nil, nil); err != nil {
			return err
		}
		if !opts.JSON() {
			fmt.Fprintf(stdout, "gateway %s deleted\n", name)
		}
		return nil
	default:
		fmt.Fprint(stderr, gatewaysUsage)
		return Usagef("unknown command %q", cmd)
	}
}

// parseInterleaved parses flags placed before or after one positional
// argument, which it returns ("" when there is none).
func parseInterleaved(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parseAll(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) > 1 {
		return "", Usagef("unexpected arguments %q", pos[1:])
	}
	if len(pos) == 0 {
		return "", nil
	}
	return pos[0], nil
}

// parseAll parses fs's flags wherever they stand among args, before or
// after the positional arguments, and returns those in order; everything
// after "--" is positional.
func parseAll(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		// Parse stops at "--", which it consumes, or at a positional.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	return pos, nil
}

func readJSONFile(path string, v any) error {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("-f: %w", err)
		}
		defer f.Close()
		r = f
	}
	dec := json.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("-f %s: not valid JSON: %w", path, err)
	}
	return nil
}
