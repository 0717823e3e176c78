// Command conch-cluster starts and stops a local multi-process conch
// cluster (package localcluster): `make cluster` and `make cluster-down`.
//
//	conch-cluster up   [-dir .cluster] [-conch bin/conch] [-minio .cache/bin/minio]
//	conch-cluster down [-dir .cluster]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/conch-sh/conch/services/internal/localcluster"
)

const usage = `usage: conch-cluster up|down [flags]

  up     start etcd (3 members), MinIO and two processes of each service on
         loopback, in the background; print the routers' URLs and the admin key
  down   stop the cluster started in -dir

Run "conch-cluster <command> -h" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "conch-cluster:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	fs := flag.NewFlagSet("conch-cluster "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", ".cluster", "directory of the cluster's state, data and logs")
	switch args[0] {
	case "up":
		conch := fs.String("conch", "bin/conch", "the conch binary")
		minio := fs.String("minio", envOr("CONCH_MINIO_BIN", ".cache/bin/minio"), "the MinIO server binary")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return up(ctx, *dir, *conch, *minio, stdout, stderr)
	case "down":
		timeout := fs.Duration("timeout", localcluster.DefaultStopTimeout, "how long each member may take to stop before it is killed")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if err := localcluster.Down(*dir, *timeout); err != nil {
			if localcluster.IsNotExist(err) {
				fmt.Fprintf(stdout, "no cluster in %s\n", *dir)
				return nil
			}
			return err
		}
		fmt.Fprintf(stdout, "cluster in %s stopped (logs kept in %s/logs)\n", *dir, *dir)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// up starts a cluster in dir, or, when every member of the one there
// runs, says so: `make load` brings a cluster up only if it is not.
func up(ctx context.Context, dir, conch, minio string, stdout, stderr io.Writer) error {
	if s, err := localcluster.ReadState(dir); err == nil {
		live, err := localcluster.Live(dir)
		if err != nil {
			return err
		}
		if len(live) == len(s.Members) && len(live) > 0 {
			printState(stdout, "conch cluster is already up", dir, s)
			return nil
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := localcluster.Start(ctx, localcluster.Options{Dir: dir, Conch: conch, MinIO: minio, Detach: true, Logger: log})
	if err != nil {
		return err
	}
	s := c.State()
	printState(stdout, "conch cluster is up in the background", c.Dir(), &s)
	return nil
}

func printState(w io.Writer, title, dir string, s *localcluster.State) {
	fmt.Fprintf(w, `%s
  routers:   %s
  admin key: %s
  etcd:      %s
  minio:     http://%s (bucket %s)
  state:     %s/%s, logs in %s/logs
stop it with: make cluster-down
`, title, strings.Join(s.Routers, " "), s.AdminKey, strings.Join(s.EtcdEndpoints, ","), s.S3.Endpoint, s.S3.Bucket,
		dir, localcluster.StateFile, dir)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
