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
	cluster := flag.String("cluster", "", "drive the cluster `make cluster` keeps in this directory (its routers and admin key)")
	flag.Parse()
	if *cluster != "" {
		st, err := localcluster.ReadState(*cluster)
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
	rs, err := load.Run(ctx, load.Options{URLs: strings.Split(*urls, ","), Key: *key, Phases: phases, Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "conchload:", err)
		os.Exit(1)
	}
	load.Print(os.Stdout, rs)
	if *out != "" {
		b, _ := json.MarshalIndent(rs, "", "  ")
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

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
