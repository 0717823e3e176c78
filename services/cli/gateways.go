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
  list                  list the account's gateways
  get NAME              show a gateway (secrets are never shown)
  create NAME [flags]   create a gateway
  update NAME [flags]   change only the fields the flags and -f give;
                        the rest of the gateway, secrets included, is kept
  rm NAME               delete a gateway
`

var gatewaysGroup = &group{
	name:    "gateways",
	summary: "list, get, create, update and delete gateways",
	usage:   gatewaysUsage,
	args:    map[string]arity{"get": {1, 1}, "create": {1, 1}, "update": {1, 1}, "rm": {1, 1}},
	flags:   func(cmd string) *flag.FlagSet { return new(gatewaysFlags).flagSet(cmd) },
}

// gatewaysFlags are the values of the flags of a gateways command.
type gatewaysFlags struct {
	Options
	file, provider, model, baseURL, keyEnv string
	shell                                  optionalBool
	replace                                bool
}

// flagSet is the flag set of gateways command cmd, bound to f: what the
// command parses and what its help lists.
func (f *gatewaysFlags) flagSet(cmd string) *flag.FlagSet {
	fs := f.newFlagSet("conch gateways")
	if cmd == "create" || cmd == "update" {
		file := "read the gateway from JSON `FILE` (- for stdin), its fields as docs/reference/gateways.md describes them"
		if cmd == "update" {
			file += "; only the fields it holds change"
		}
		fs.StringVar(&f.file, "f", "", file)
		fs.StringVar(&f.provider, "provider", "", "upstream `PROVIDER`: openai, anthropic or scripted")
		fs.StringVar(&f.model, "model", "", "upstream `MODEL`")
		fs.StringVar(&f.baseURL, "base-url", "", "upstream base `URL`")
		fs.StringVar(&f.keyEnv, "api-key-env", "", "read the upstream API key from the environment variable `VAR`")
		fs.Var(&f.shell, "shell", "offer the shell tool even when requests do not ask for it (--shell=false: only when they do)")
	}
	if cmd == "update" {
		fs.BoolVar(&f.replace, "replace", false, "replace the whole gateway with -f and the flags, as PUT does (secrets left out are still kept)")
	}
	return fs
}

// Gateways runs `conch gateways ...`.
func Gateways(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f gatewaysFlags
	cmd, pos, err := gatewaysGroup.parse(stdout, args, f.flagSet)
	if err != nil {
		return err
	}
	c, err := NewClient(&f.Options)
	if err != nil {
		return err
	}
	name := ""
	if len(pos) > 0 {
		name = pos[0]
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
		if f.JSON() {
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
		g, err := gatewayBody(f.file, map[string]string{"provider": f.provider, "model": f.model, "base_url": f.baseURL}, f.keyEnv, f.shell.value)
		if err != nil {
			return err
		}
		// create and update --replace send a whole gateway; update sends
		// only what was given, and the router's PATCH changes just that.
		method, target := "POST", "/api/v1/gateways"
		switch {
		case cmd == "create":
			g["name"] = name
		case f.replace:
			g["name"] = name
			method, target = "PUT", path
		case len(g) == 0:
			return &UsageError{Cmd: "conch gateways update", Msg: fmt.Sprintf("nothing to change in %s; give -f FILE or a flag (see 'conch gateways update --help')", name)}
		default:
			method, target = "PATCH", path
		}
		var out map[string]any
		if err := c.JSON(ctx, method, target, g, &out); err != nil {
			return err
		}
		if f.JSON() {
			return PrintJSON(stdout, out)
		}
		fmt.Fprintf(stdout, "gateway %s %sd\n", name, cmd)
		return nil
	case "rm":
		if err := c.JSON(ctx, "DELETE", path, nil, nil); err != nil {
			return err
		}
		if !f.JSON() {
			fmt.Fprintf(stdout, "gateway %s deleted\n", name)
		}
		return nil
	}
	return UnknownCommand("conch gateways", cmd, gatewaysGroup.next(""))
}

// gatewayBody is the gateway JSON of create and update: the fields of file
// (when given), then those of the flags the command line gave, so nothing
// the user did not give is sent. upstream maps the upstream's JSON fields
// to their flag values, "" meaning unset; shell is nil when not given.
func gatewayBody(file string, upstream map[string]string, keyEnv string, shell *bool) (map[string]any, error) {
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
	if shell != nil {
		sh, _ := g["shell"].(map[string]any)
		if sh == nil {
			sh = map[string]any{}
		}
		sh["enabled"] = *shell
		g["shell"] = sh
	}
	return g, nil
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
