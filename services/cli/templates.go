package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
)

const templatesUsage = `usage: conch templates <command> [flags]

Commands:
  create [flags] <name>     make a template (from --image, or the executor's own root until "push")
  push <name> <archive>     give a template an image: a "docker save", "podman save" or OCI layout tar
  list                      list the account's templates
  get <name>                show a template
  rm <name>...              delete templates

A sandbox starts from one with "conch sandbox create --template NAME".
`

var templatesGroup = &group{
	name:    "templates",
	summary: "make sandbox templates from container images",
	usage:   templatesUsage,
	prose: map[string]string{
		"push": `The archive is checked and flattened into one root filesystem;
the command returns once the template is ready, or says why the image
was refused. "-" reads the archive from standard input:

  docker save python:3.12-slim | conch templates push py -
`,
	},
	args:  map[string]arity{"create": {1, 1}, "push": {2, 2}, "get": {1, 1}, "rm": {1, -1}},
	flags: func(cmd string) *flag.FlagSet { return new(templatesFlags).flagSet(cmd) },
}

// templatesFlags are the values of the flags of a templates command.
type templatesFlags struct {
	Options
	image, start, ready, workdir string
	env                          envFlag
}

func (f *templatesFlags) flagSet(cmd string) *flag.FlagSet {
	fs := f.newFlagSet("conch templates")
	if cmd == "create" {
		fs.StringVar(&f.image, "image", "", "pull the image `REF` (host/repository:tag) from a registry the operator allows")
		fs.StringVar(&f.start, "start", "", "a `COMMAND` run once, in the background, when a sandbox starts")
		fs.StringVar(&f.ready, "ready", "", "a `COMMAND` run until it exits 0 before a sandbox is handed out")
		fs.StringVar(&f.workdir, "workdir", "", "the working `DIR` commands start in (writable; the image's by default)")
		fs.Var(&f.env, "env", "`K=V` in every command's environment (repeatable)")
	}
	return fs
}

// Template is a template as the REST API returns it
// (docs/reference/sandboxes.md).
type Template struct {
	Name         string            `json:"name"`
	Image        string            `json:"image,omitempty"`
	StartCommand string            `json:"start_command,omitempty"`
	ReadyCommand string            `json:"ready_command,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Workdir      string            `json:"workdir,omitempty"`
	Status       string            `json:"status"`
	Error        string            `json:"error,omitempty"`
	Warnings     []string          `json:"warnings,omitempty"`
	Digest       string            `json:"digest,omitempty"`
	SizeBytes    int64             `json:"size_bytes,omitempty"`
	CreatedAt    string            `json:"created_at"`
	UpdatedAt    string            `json:"updated_at"`
}

// Templates runs `conch templates ...`.
func Templates(ctx context.Context, args []string, stdin io.Reader, stdout, _ io.Writer) error {
	var f templatesFlags
	cmd, pos, err := templatesGroup.parse(stdout, args, f.flagSet)
	if err != nil {
		return err
	}
	c, err := NewClient(&f.Options)
	if err != nil {
		return err
	}
	show := func(t Template) error {
		if f.JSON() {
			return PrintJSON(stdout, t)
		}
		printTemplate(stdout, t)
		return nil
	}
	switch cmd {
	case "create":
		body := map[string]any{"name": pos[0], "image": f.image, "start_command": f.start, "ready_command": f.ready, "workdir": f.workdir}
		if len(f.env) > 0 {
			body["env"] = f.env.vars()
		}
		var t Template
		if err := c.JSON(ctx, "POST", "/api/v1/templates", body, &t); err != nil {
			return err
		}
		return show(t)
	case "push":
		r, size := stdin, int64(-1)
		if pos[1] != "-" {
			file, err := os.Open(pos[1])
			if err != nil {
				return err
			}
			defer file.Close()
			st, err := file.Stat()
			if err != nil {
				return err
			}
			r, size = file, st.Size()
		}
		req, err := c.Request(ctx, "PUT", "/api/v1/templates/"+url.PathEscape(pos[0])+"/image", io.NopCloser(r))
		if err != nil {
			return err
		}
		req.ContentLength = size
		var t Template
		if err := c.DoJSON(req, &t); err != nil {
			return err
		}
		return show(t)
	case "list":
		var out struct {
			Templates []Template `json:"templates"`
		}
		if err := c.JSON(ctx, "GET", "/api/v1/templates", nil, &out); err != nil {
			return err
		}
		if f.JSON() {
			return PrintJSON(stdout, out)
		}
		tw := NewTable(stdout, "NAME", "STATUS", "IMAGE", "DIGEST", "SIZE", "UPDATED")
		for _, t := range out.Templates {
			tw.Row(t.Name, t.Status, t.Image, shortDigest(t.Digest), fmt.Sprint(t.SizeBytes), t.UpdatedAt)
		}
		return tw.Flush()
	case "get":
		var t Template
		if err := c.JSON(ctx, "GET", "/api/v1/templates/"+url.PathEscape(pos[0]), nil, &t); err != nil {
			return err
		}
		return show(t)
	case "rm":
		for _, name := range pos {
			if err := c.JSON(ctx, "DELETE", "/api/v1/templates/"+url.PathEscape(name), nil, nil); err != nil {
				return err
			}
		}
		return nil
	}
	return UnknownCommand("conch templates", cmd, templatesGroup.next(""))
}

// shortDigest is a digest's first 12 hexadecimal digits, as container
// tools show image ids.
func shortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

func printTemplate(w io.Writer, t Template) {
	fmt.Fprintf(w, "name:     %s\nstatus:   %s\n", t.Name, t.Status)
	for _, kv := range [][2]string{{"error", t.Error}, {"image", t.Image}, {"digest", t.Digest}, {"workdir", t.Workdir}, {"start", t.StartCommand}, {"ready", t.ReadyCommand}} {
		if kv[1] != "" {
			fmt.Fprintf(w, "%-9s %s\n", kv[0]+":", kv[1])
		}
	}
	if t.SizeBytes > 0 {
		fmt.Fprintf(w, "size:     %d bytes\n", t.SizeBytes)
	}
	for _, k := range slices.Sorted(maps.Keys(t.Env)) {
		fmt.Fprintf(w, "env:      %s=%s\n", k, t.Env[k])
	}
	for _, m := range t.Warnings {
		fmt.Fprintf(w, "warning:  %s\n", m)
	}
}
