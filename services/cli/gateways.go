package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"text/tabwriter"
)

const gatewaysUsage = `usage: conch gateways <command> [flags]

Commands:
  list                      list the account's gateways
  get NAME                  show a gateway (secrets are never shown)
  create NAME [flags]       create a gateway
  update NAME [flags]       change only the fields the flags and -f give;
                            the rest of the gateway, secrets included, is kept
  rm NAME                   delete a gateway

Flags of create and update:
  -f FILE         the gateway as JSON (SPEC §4 fields; - for stdin); on
                  update, the fields it holds are changed
  --provider P    upstream provider: openai, anthropic or scripted
  --model M       upstream model
  --base-url U    upstream base URL
  --api-key-env V read the upstream API key from environment variable V
  --shell         offer the shell tool even when requests do not ask for it
                  (--shell=false: only when they do)
  --replace       update: replace the whole gateway with -f and the flags,
                  as PUT does (secrets left out are still kept)
`

// Gateways runs `conch gateways ...`.
func Gateways(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if wantsHelp(args) {
		printHelp(stdout, "conch gateways", gatewaysUsage, args)
		return nil
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, gatewaysUsage)
		return Usagef("conch gateways needs a command")
	}
	cmd, args := args[0], args[1:]
	if !slices.Contains(commandNames(gatewaysUsage), cmd) {
		return UnknownCommand("conch gateways", cmd, commandNames(gatewaysUsage))
	}
	fs := flag.NewFlagSet("conch gateways "+cmd, flag.ContinueOnError)
	var opts Options
	opts.AddFlags(fs)
	var file, provider, model, baseURL, keyEnv string
	var shell, replace bool
	if cmd == "create" || cmd == "update" {
		fs.StringVar(&file, "f", "", "gateway JSON file (- for stdin)")
		fs.StringVar(&provider, "provider", "", "upstream provider")
		fs.StringVar(&model, "model", "", "upstream model")
		fs.StringVar(&baseURL, "base-url", "", "upstream base URL")
		fs.StringVar(&keyEnv, "api-key-env", "", "environment variable holding the upstream API key")
		fs.BoolVar(&shell, "shell", false, "offer the shell tool by default")
	}
	if cmd == "update" {
		fs.BoolVar(&replace, "replace", false, "replace the whole gateway (PUT)")
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
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		g, err := gatewayBody(file, given, map[string]string{"provider": provider, "model": model, "base_url": baseURL}, keyEnv, shell)
		if err != nil {
			return err
		}
		// create and update --replace send a whole gateway; update sends
		// only what was given, and the router's PATCH changes just that.
		method, target := "POST", "/api/v1/gateways"
		switch {
		case cmd == "create":
			g["name"] = name
		case replace:
			g["name"] = name
			method, target = "PUT", path
		case len(g) == 0:
			return Usagef("conch gateways update %s: nothing to change; give -f FILE or a flag (see -h)", name)
		default:
			method, target = "PATCH", path
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
		return UnknownCommand("conch gateways", cmd, commandNames(gatewaysUsage))
	}
}

// gatewayBody is the gateway JSON of create and update: the fields of file
// (when given), then those of the flags the command line gave (given
// names them), so nothing the user did not give is sent. upstream maps
// the upstream's JSON fields to their flag values, "" meaning unset.
func gatewayBody(file string, given map[string]bool, upstream map[string]string, keyEnv string, shell bool) (map[string]any, error) {
	g := map[string]any{}
	if file != "" {
		if err := readJSONFile(file, &g); err != nil {
			return nil, err
		}
	}
	up, _ := g["upstream"].(map[string]any)
	if up == nil {
		up = map[string]any{}
	}
	for k, v := range upstream {
		if v != "" {
			up[k] = v
		}
	}
	if keyEnv != "" {
		key, ok := os.LookupEnv(keyEnv)
		if !ok || key == "" {
			return nil, fmt.Errorf("--api-key-env: %s is not set", keyEnv)
		}
		up["api_key"] = key
	}
	if len(up) > 0 {
		g["upstream"] = up
	}
	if given["shell"] {
		sh, _ := g["shell"].(map[string]any)
		if sh == nil {
			sh = map[string]any{}
		}
		sh["enabled"] = shell
		g["shell"] = sh
	}
	return g, nil
}

// parseInterleaved parses flags placed before or after one positional
// argument, which it returns ("" when there is none).
func parseInterleaved(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parseFlags(fs, fs.Name(), args)
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
