// Command conch is the single binary of conch: the whole cluster in one
// process (`conch dev`), one service for clusters (`conch router|executor|
// approval|workspace`), one etcd member (`conch etcd`), and client commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/conch-sh/conch/services/cli"
	"github.com/conch-sh/conch/services/executor/sandbox/agent"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/executor/toolshim"
	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/dirlock"
	"github.com/conch-sh/conch/services/launch"
)

// version is the release this binary was built as; `make build` sets it
// (-ldflags "-X main.version=…").
var version = "dev"

// buildCommit is the commit the binary was built from, as Go recorded it,
// or as make set it when the build recorded none.
func buildCommit() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return commit
}

// commit is the fallback of buildCommit; `make build` sets it.
var commit = "unknown"

func main() {
	// Inside a sandbox the conch binary also runs as each tool command.
	if name, ok := toolshim.Command(os.Args[0], wire.ToolsDir); ok {
		os.Exit(toolshim.Run(wire.ToolsDir, name, os.Args[1:], os.Stdout, os.Stderr))
	}
	// The first signal asks for an orderly stop, bounded by each command's
	// deadlines; then the signals' default action is back, so that a
	// second one ends the process at once, whatever it is waiting on. It
	// is back before the context ends: once anything has reacted to the
	// first signal (a server saying it drains), a second one ends it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := stopSignals(os.Args[1:])
	first := make(chan os.Signal, 1)
	signal.Notify(first, sigs...)
	go func() {
		<-first
		signal.Reset(sigs...)
		cancel()
	}()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// A client command stopped by the signal says so in its exit
			// code, not in a "context canceled" line.
			err = cli.ErrInterrupted
		}
		report(os.Stderr, os.Args[1:], err)
		os.Exit(exitCode(err))
	}
}

// stopSignals are the signals that stop the command of args. conch chat
// handles Ctrl-C itself: it cancels the turn under way, not the chat.
func stopSignals(args []string) []os.Signal {
	if len(args) > 0 && args[0] == "chat" {
		return []os.Signal{syscall.SIGTERM}
	}
	return []os.Signal{os.Interrupt, syscall.SIGTERM}
}

// report writes err, which args's command returned, to w as one line,
// unless the command has said what went wrong already.
func report(w io.Writer, args []string, err error) {
	var exit *cli.ExitError
	var held *dirlock.HeldError
	var bad *cli.UsageError
	switch {
	case errors.Is(err, flag.ErrHelp), errors.As(err, &exit), errors.Is(err, cli.ErrInterrupted), err == cli.ErrUsage:
	case errors.As(err, &bad) && bad.Cmd != "":
		fmt.Fprintln(w, bad)
	case errors.As(err, &held):
		// Another process holds the command's data dir: the line names
		// the command, the dir as given and the holder's pid, and
		// nothing of the layers in between.
		fmt.Fprintf(w, "conch %s: %v\n", args[0], held)
	default:
		fmt.Fprintln(w, "conch:", err)
	}
}

func exitCode(err error) int {
	var exit *cli.ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		// Help was asked for and printed.
		return 0
	case errors.Is(err, cli.ErrUsage):
		return 2
	case errors.Is(err, cli.ErrTimeout):
		return 124
	case errors.Is(err, cli.ErrInterrupted):
		return 130
	}
	return 1
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, cli.Usage())
		return cli.ErrUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "dev":
		var cfg launch.DevConfig
		if err := load(cmd, args, &cfg, stdout); err != nil {
			return err
		}
		return launch.RunDev(ctx, cfg, stdout)
	case "router":
		var cfg launch.RouterConfig
		if err := load(cmd, args, &cfg, stdout); err != nil {
			return err
		}
		return launch.RunRouter(ctx, cfg)
	case "workspace":
		var cfg launch.WorkspaceConfig
		if err := load(cmd, args, &cfg, stdout); err != nil {
			return err
		}
		return launch.RunWorkspace(ctx, cfg)
	case "executor":
		var cfg launch.ExecutorConfig
		if err := load(cmd, args, &cfg, stdout); err != nil {
			return err
		}
		return launch.RunExecutor(ctx, cfg)
	case "etcd":
		var cfg launch.EtcdConfig
		if err := load(cmd, args, &cfg, stdout); err != nil {
			return err
		}
		return launch.RunEtcd(ctx, cfg)
	case "etcd-pki":
		var cfg launch.EtcdPKIConfig
		if err := loadDoc(cmd, etcdPKIUsage, args, &cfg, stdout); err != nil {
			return err
		}
		return launch.RunEtcdPKI(cfg, stdout)
	case "etcd-auth":
		var cfg launch.EtcdAuthConfig
		if err := loadDoc(cmd, etcdAuthUsage, args, &cfg, stdout); err != nil {
			return err
		}
		return launch.RunEtcdAuth(ctx, cfg, stdout)
	case "minio-auth":
		var cfg launch.MinIOAuthConfig
		if err := loadDoc(cmd, minioAuthUsage, args, &cfg, stdout); err != nil {
			return err
		}
		return launch.RunMinIOAuth(ctx, cfg, stdout)
	case wire.AgentCommand:
		// Hidden: the resident agent inside each sandbox.
		return agent.Run()
	case wire.WatchCommand:
		// Hidden: a file watch inside a sandbox.
		return agent.RunWatch(args)
	case "approval":
		var cfg launch.ApprovalConfig
		if err := load(cmd, args, &cfg, stdout); err != nil {
			return err
		}
		return launch.RunApproval(ctx, cfg)
	case "secrets":
		return runSecrets(ctx, args, stdout, stderr)
	case "node":
		var cfg launch.NodeConfig
		if err := load(cmd, args, &cfg, stdout); err != nil {
			return err
		}
		return launch.RunNode(ctx, cfg)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, cli.Usage())
		return nil
	case "version", "--version":
		fmt.Fprintf(stdout, "conch %s (commit %s)\n", version, buildCommit())
		return nil
	}
	if c, ok := cli.LookupCommand(cmd); ok {
		return c.Run(ctx, args, os.Stdin, stdout, stderr)
	}
	words := []string{"help", "version"}
	for _, c := range launch.Commands() {
		words = append(words, strings.Fields(c.Name)[0])
	}
	for _, c := range cli.Commands() {
		words = append(words, c.Name)
	}
	return cli.UnknownCommand("conch", cmd, words)
}

const secretsUsage = `usage: conch secrets rotate [--etcd-endpoints ...] [--secrets-key-file FILE]

rotate re-seals, with the first key of the keyring (CONCH_SECRETS_KEY or
--secrets-key-file, as the router and approval service read it), every
stored secret sealed with another key or stored before secrets were sealed.
Run it once every service has the new keyring; then the older keys may go.
`

// runSecrets runs `conch secrets <subcommand>`; rotate is the one there is.
func runSecrets(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) == 0:
		fmt.Fprint(stderr, secretsUsage)
		return cli.ErrUsage
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stdout, secretsUsage)
		return nil
	case args[0] != "rotate":
		return cli.UnknownCommand("conch secrets", args[0], []string{"rotate"})
	}
	var cfg launch.SecretsRotateConfig
	if err := load("secrets rotate", args[1:], &cfg, stdout); err != nil {
		return err
	}
	return launch.RunSecretsRotate(ctx, cfg, stdout)
}

const etcdPKIUsage = `usage: conch etcd-pki --dir DIR --hosts HOST[,HOST...]

etcd-pki makes, in DIR, what etcd's mutual TLS needs: a CA (ca.pem,
ca-key.pem), the certificate every etcd member serves and dials its peers
with (etcd.pem, etcd-key.pem; valid for --hosts, localhost and 127.0.0.1),
the client certificate of etcd's root user (root.pem, root-key.pem) and one
client certificate per service, whose common name is the service's etcd
user (router, executor, approval, workspace: NAME.pem, NAME-key.pem).
Files that are there and still valid are kept: delete one and run again to
make it anew; delete ca.pem to make them all anew. ca-key.pem signs
certificates only; no member or service needs it.

`

const etcdAuthUsage = `usage: conch etcd-auth --etcd-endpoints URL,... --etcd-ca-file ca.pem --etcd-cert-file root.pem --etcd-key-file root-key.pem

etcd-auth makes each service an etcd user whose role holds only its key
prefixes, then turns etcd's authentication on, as the root user of the
certificate given (made by conch etcd-pki). It waits up to --wait for etcd
to answer and changes nothing that is already right: run it on every
install and upgrade.

`

const minioAuthUsage = `usage: conch minio-auth [--endpoint host:port]

minio-auth makes, as MinIO's root user (MINIO_ROOT_USER, MINIO_ROOT_PASSWORD),
each service's bucket, a policy limited to that bucket and a MinIO user that
holds only that policy: the workspace service's (CONCH_S3_ACCESS_KEY,
CONCH_S3_SECRET_KEY, CONCH_S3_BUCKET, default conch), the approval
service's, for the audit trail (CONCH_AUDIT_S3_ACCESS_KEY,
CONCH_AUDIT_S3_SECRET_KEY, CONCH_AUDIT_S3_BUCKET, default conch-audit), and
the router's, for stored responses (CONCH_RESPONSES_S3_ACCESS_KEY,
CONCH_RESPONSES_S3_SECRET_KEY, CONCH_RESPONSES_S3_BUCKET, default
conch-responses): the variables the services read. No service needs
root's keys, and no two share a key or a bucket. It waits up to --wait for
MinIO to answer, puts back what was changed by hand and changes nothing
that is right: run it on every install and upgrade, and again after
changing a service's secret.

`

// loadDoc is load for a command whose --help opens with doc.
func loadDoc(cmd, doc string, args []string, cfg any, stdout io.Writer) error {
	fs := flag.NewFlagSet("conch "+cmd, flag.ContinueOnError)
	// A bad flag is one line with a suggestion (cli.FlagError), not the
	// flag package's error and list of every flag.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := config.Load(fs, args, cfg)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, doc)
		fmt.Fprintln(stdout, "Flags (each also read from the environment variable it names):")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		// Not nil: the command must not run. main exits 0, as asked.
		return flag.ErrHelp
	}
	return cli.FlagError(fs, fs.Name(), err)
}

// load parses a command's flags and environment into cfg and validates it.
func load(cmd string, args []string, cfg any, stdout io.Writer) error {
	c, _ := launch.LookupCommand(cmd)
	doc := fmt.Sprintf("usage: conch %s [flags]\n\nconch %s %s\n\n", cmd, cmd, c.Summary)
	return loadDoc(cmd, doc, args, cfg, stdout)
}
