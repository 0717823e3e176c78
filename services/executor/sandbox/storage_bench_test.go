package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/conchtest"
)

// BenchmarkCopyOnWrite makes copies of a sandbox holding 100 MB of
// settled files on btrfs storage (Spec.From), alternated with cold
// creates of empty sandboxes on the same storage, which a copy is plus
// its snapshots, and with cp --reflink=never -a of the same files inside
// the source. Teardown is not timed.
func BenchmarkCopyOnWrite(b *testing.B) {
	root := filepath.Join(conchtest.Btrfs(b, 4<<30), "storage")
	r := ownRuntime(b, Config{Storage: root, AgentBinary: benchAgent()})
	src, err := r.Create(b.Context(), Spec{ID: fmt.Sprintf("cowsrc%d", os.Getpid())})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Destroy(b.Context())
	if res := sh(b, src, "for i in 0 1 2 3 4 5 6 7 8 9; do head -c 10000000 /dev/urandom > f$i; done; sync"); res.exit.Code != 0 {
		b.Fatalf("write: %+v %s", res.exit, res.stderr)
	}
	var copies, colds, cps []time.Duration
	i := 0
	for b.Loop() {
		i++
		for _, from := range []*Sandbox{src, nil} {
			start := time.Now()
			sb, err := r.Create(b.Context(), Spec{ID: fmt.Sprintf("cow%d-%d-%t", os.Getpid(), i, from != nil), From: from})
			if err != nil {
				b.Fatal(err)
			}
			if from != nil {
				copies = append(copies, time.Since(start))
			} else {
				colds = append(colds, time.Since(start))
			}
			b.StopTimer()
			if err := sb.Destroy(b.Context()); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		res := sh(b, src, "s=$(date +%s%N); cp --reflink=never -a /home/workspace /tmp/copy; e=$(date +%s%N); rm -rf /tmp/copy; echo $((e-s))")
		ns, err := strconv.ParseInt(strings.TrimSpace(res.stdout), 10, 64)
		if err != nil {
			b.Fatalf("cp timing %q: %v", res.stdout, err)
		}
		cps = append(cps, time.Duration(ns))
	}
	reportP50As(b, copies, "copy-p50-ms")
	reportP50As(b, colds, "cold-p50-ms")
	reportP50As(b, cps, "cp-p50-ms")
}
