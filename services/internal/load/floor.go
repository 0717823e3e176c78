package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
)

// The floor is the load mix's work done with no conch: for each
// completion of the same mix, a bubblewrap sandbox with a sandbox's
// isolation flags and seccomp filter, the completion's commands run in it,
// each by a shell of its own as conch runs them, and, for a persistent
// workspace's completion, its file read from and written back to the
// object store. No model, no router, no approval, no etcd, no agent, no
// cgroup: what any gateway giving a model a sandboxed shell must at least
// do, at the same concurrency, on the same machine. Its completions per
// second are what conch's are measured against.

// FloorOptions configure Floor.
type FloorOptions struct {
	Concurrency int
	Duration    time.Duration
	// Bwrap is bubblewrap's path; Seccomp the filter program sandboxes
	// run under (seccomp.Program()).
	Bwrap   string
	Seccomp []byte
	// Store and Bucket keep the persistent workspaces' files; the
	// bucket must exist.
	Store  *minio.Client
	Bucket string
	// UIDBase is the first of Concurrency uids the sandboxes run as,
	// one per client, as conch runs each sandbox as a uid of its own.
	UIDBase int
}

// FloorResult is the floor's outcome.
type FloorResult struct {
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	Completions int     `json:"completions"`
	PerSecond   float64 `json:"completions_per_second"`
	Commands    int     `json:"shell_commands"`
}

// backticked are a prompt's commands.
var backticked = regexp.MustCompile("`([^`]*)`")

// commandsOf are the commands the scripted model runs for k's prompt
// numbered n.
func commandsOf(k kind, n int) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(fmt.Sprintf(k.prompt, n), -1) {
		out = append(out, m[1])
	}
	return out
}

// Floor runs the floor's clients for opts.Duration. Any failure of its
// work fails it: a floor that skipped work would flatter it.
func Floor(ctx context.Context, opts FloorOptions) (FloorResult, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	var (
		mu       sync.Mutex
		done     int
		commands int
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for i := range opts.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				k := pick()
				n, err := floorOne(ctx, opts, opts.UIDBase+i, k, next())
				mu.Lock()
				switch {
				case err != nil && ctx.Err() == nil:
					if firstErr == nil {
						firstErr = err
					}
					cancel()
				case err == nil:
					done++
					commands += n
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if firstErr != nil {
		return FloorResult{}, firstErr
	}
	return FloorResult{Concurrency: opts.Concurrency, Seconds: secs, Completions: done, PerSecond: float64(done) / secs, Commands: commands}, nil
}

// floorOne does one completion's work of kind k, numbered n, as uid, and
// returns the commands it ran.
func floorOne(ctx context.Context, opts FloorOptions, uid int, k kind, n int) (int, error) {
	cmds := commandsOf(k, n)
	if len(cmds) != k.commands {
		return 0, fmt.Errorf("load: floor: %s's prompt names %d commands, want %d", k.name, len(cmds), k.commands)
	}
	workspace := []string{"--tmpfs", "/home/workspace"}
	var dir, key string
	if k.user {
		var err error
		if dir, err = os.MkdirTemp("", "conch-floor-"); err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		if err := os.Chown(dir, uid, uid); err != nil {
			return 0, err
		}
		key = fmt.Sprintf("floor/load-user-%d/log.txt", n%8)
		if err := floorHydrate(ctx, opts, key, filepath.Join(dir, "log.txt"), uid); err != nil {
			return 0, err
		}
		workspace = []string{"--bind", dir, "/home/workspace"}
	}
	// Each command by a shell of its own, one after the other, in the
	// sandbox's workspace.
	script := ""
	args := []string{"sh"}
	for i, c := range cmds {
		script += "cd /home/workspace && /bin/sh -c \"$" + strconv.Itoa(i+1) + "\" || exit $?\n"
		args = append(args, c)
	}
	bw := append([]string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup",
		"--uid", "1000", "--gid", "1000", "--hostname", "sandbox",
		"--die-with-parent", "--new-session", "--clearenv", "--seccomp", "3", "--as-pid-1",
		"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
	}, workspace...)
	bw = append(append(bw, "--chdir", "/home/workspace", "--", "/bin/sh", "-c", script), args...)
	filter, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	// A completion started is done to its end: a sandbox killed midway
	// (bubblewrap's monitor, not what it started) can leave its
	// processes behind. The phase's end is checked between completions.
	cmd := exec.Command(opts.Bwrap, bw...)
	cmd.WaitDelay = 30 * time.Second
	cmd.ExtraFiles = []*os.File{filter}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Start()
	filter.Close()
	if err == nil {
		_, err = w.Write(opts.Seccomp)
		w.Close()
		err = errors.Join(err, cmd.Wait())
	} else {
		w.Close()
	}
	if err != nil {
		return 0, fmt.Errorf("load: floor: %s: %w: %s", k.name, err, out.Bytes())
	}
	if k.user {
		f, err := os.Open(filepath.Join(dir, "log.txt"))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return 0, err
		}
		if _, err := opts.Store.PutObject(ctx, opts.Bucket, key, f, st.Size(), minio.PutObjectOptions{}); err != nil {
			return 0, fmt.Errorf("load: floor: put %s: %w", key, err)
		}
	}
	return len(cmds), nil
}

// floorHydrate writes key's object, if there is one, to path, owned by
// uid.
func floorHydrate(ctx context.Context, opts FloorOptions, key, path string, uid int) error {
	obj, err := opts.Store.GetObject(ctx, opts.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load: floor: get %s: %w", key, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	return os.Chown(path, uid, uid)
}
