// Command conchload drives a running conch cluster with concurrent chat
// completions (`make load`) and reports throughput, latency and errors.
// It exits 1 when any completion failed other than by a 429/503 with
// Retry-After in the overload phase.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/conch-sh/conch/services/executor/sandbox/seccomp"
	"github.com/conch-sh/conch/services/internal/load"
	"github.com/conch-sh/conch/services/internal/localcluster"
)

func main() {
	urls := flag.String("url", envOr("CONCH_URL", "http://127.0.0.1:8080"), "router base URLs, comma separated; clients spread over them")
	key := flag.String("key", os.Getenv("CONCH_API_KEY"), "API key (default $CONCH_API_KEY)")
	conc := flag.Int("concurrency", 8, "clients of the sustained phase")
	dur := flag.Duration("duration", 30*time.Second, "length of the sustained phase")
	over := flag.Int("overload", 0, "clients of the overload phase (0: none)")
	overDur := flag.Duration("overload-duration", 10*time.Second, "length of the overload phase")
	out := flag.String("json", "", "also write the results as JSON to this file")
	cluster := flag.String("cluster", "", "drive the cluster `make cluster` keeps in this directory (its routers and admin key); also report what each kind of its processes spent per completion, and the floor")
	floorDur := flag.Duration("floor-duration", 20*time.Second, "with -cluster, how long the floor runs: the sustained phase's work with no conch, at its concurrency (0: no floor)")
	flag.Parse()
	var st *localcluster.State
	if *cluster != "" {
		var err error
		st, err = localcluster.ReadState(*cluster)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conchload:", err, "(is `make cluster` running?)")
			os.Exit(2)
		}
		*urls, *key = strings.Join(st.Routers, ","), st.AdminKey
	}
	if *key == "" {
		fmt.Fprintln(os.Stderr, "conchload: --key or CONCH_API_KEY is required")
		os.Exit(2)
	}
	phases := []load.Phase{{Name: "sustained", Concurrency: *conc, Duration: *dur}}
	if *over > 0 {
		phases = append(phases, load.Phase{Name: "overload", Concurrency: *over, Duration: *overDur, Overload: true})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := load.Options{URLs: strings.Split(*urls, ","), Key: *key, Phases: phases, Log: os.Stderr}
	if st != nil {
		opts.CPU = st.CPU
	}
	rs, err := load.Run(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conchload:", err)
		os.Exit(1)
	}
	report := load.Report{Phases: rs}
	if st != nil && *floorDur > 0 {
		f, err := floor(ctx, st, *conc, *floorDur)
		if err != nil {
			fmt.Fprintln(os.Stderr, "conchload: floor:", err)
			os.Exit(1)
		}
		report.Floor = &f
	}
	load.Print(os.Stdout, report)
	if *out != "" {
		b, _ := json.MarshalIndent(report, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "conchload:", err)
			os.Exit(1)
		}
	}
	for _, r := range rs {
		if r.Errors > 0 {
			os.Exit(1)
		}
	}
}

// floor runs the floor (load.Floor) on the machine of the cluster st,
// against its MinIO, in a bucket of its own.
func floor(ctx context.Context, st *localcluster.State, clients int, d time.Duration) (load.FloorResult, error) {
	mc, err := minio.New(st.S3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(st.S3.AccessKey, st.S3.SecretKey, "")})
	if err != nil {
		return load.FloorResult{}, err
	}
	const bucket = "conchload-floor"
	if ok, err := mc.BucketExists(ctx, bucket); err != nil {
		return load.FloorResult{}, err
	} else if !ok {
		if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
			return load.FloorResult{}, err
		}
	}
	prog, err := seccomp.Program()
	if err != nil {
		return load.FloorResult{}, err
	}
	fmt.Fprintf(os.Stderr, "floor: %d clients for %v\n", clients, d)
	// Above the uids executors give sandboxes by default.
	return load.Floor(ctx, load.FloorOptions{Concurrency: clients, Duration: d, Bwrap: "bwrap", Seccomp: prog, Store: mc, Bucket: bucket, UIDBase: 300000})
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
