package localcluster

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/pki"
	"github.com/conch-sh/conch/services/launch"
)

// StateFile is the name of the state file in a cluster's directory.
const StateFile = "cluster.json"

// State is what a cluster keeps in its directory: enough to reach it and to
// stop it from another process. It holds the cluster's secrets, so the file
// is readable by its owner only.
type State struct {
	// AdminKey is the API key of the admin account.
	AdminKey string `json:"admin_key"`
	// InternalSecret signs the call scopes the services exchange.
	InternalSecret string `json:"internal_secret"`
	// Routers are the routers' public base URLs.
	Routers []string `json:"routers"`
	// EtcdEndpoints are the etcd members' client URLs.
	EtcdEndpoints []string `json:"etcd_endpoints"`
	// EtcdTLS are the files of the certificate clients reach etcd with
	// (user root), and of the CA that signed it and the members'.
	EtcdTLS EtcdTLS `json:"etcd_tls"`
	// S3 is the MinIO the services keep objects in, each in its own
	// bucket: workspaces' files, the audit trail, stored responses.
	S3 S3 `json:"s3"`
	// Members are the cluster's processes.
	Members []MemberState `json:"members"`
}

// EtcdTLS names the files of a client of the cluster's etcd.
type EtcdTLS struct {
	CAFile   string `json:"ca_file"`
	CertFile string `json:"cert_file"`
	KeyFile  string `json:"key_file"`
}

// Config is the TLS configuration of a client of the cluster's etcd.
func (t EtcdTLS) Config() (*tls.Config, error) {
	return pki.ClientConfig(t.CAFile, pki.Pair{CertFile: t.CertFile, KeyFile: t.KeyFile})
}

// S3 is the MinIO server's endpoint, its root credentials, the
// workspaces' bucket, and the MinIO users of the services that use it
// (launch.MinIOUser), each limited to its own bucket.
type S3 struct {
	Endpoint  string                      `json:"endpoint"`
	AccessKey string                      `json:"access_key"`
	SecretKey string                      `json:"secret_key"`
	Bucket    string                      `json:"bucket"`
	Users     map[string]launch.MinIOUser `json:"users"`
}

// MemberState is one process of the cluster.
type MemberState struct {
	// Name is unique in the cluster: "etcd-0", "minio", "router-1".
	Name string `json:"name"`
	// Kind is one of the Kind constants.
	Kind string `json:"kind"`
	// Addr is a service's gRPC address, an etcd member's client URL or
	// MinIO's endpoint.
	Addr string `json:"addr"`
	// HTTPAddr is a router's public HTTP address.
	HTTPAddr string `json:"http_addr,omitempty"`
	// Args are the command line after the binary.
	Args []string `json:"args"`
	// Log is the file the process writes its output to.
	Log string `json:"log"`
	// PID is the running process, 0 when stopped. It leads its own
	// process group.
	PID int `json:"pid,omitempty"`
	// StartTime is when the kernel started PID (in clock ticks since
	// boot), so that a recycled PID is never mistaken for the member.
	StartTime uint64 `json:"start_time,omitempty"`
}

// ReadState reads the state file of the cluster in dir.
func ReadState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, fmt.Errorf("localcluster: read state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("localcluster: read state %s: %w", filepath.Join(dir, StateFile), err)
	}
	return &s, nil
}

// writeState replaces the state file atomically.
func writeState(dir string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("localcluster: write state: %w", err)
	}
	tmp := filepath.Join(dir, StateFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("localcluster: write state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, StateFile)); err != nil {
		return fmt.Errorf("localcluster: write state: %w", err)
	}
	return nil
}

// Live returns the members of the cluster in dir whose processes still
// run; none when dir holds no cluster.
func Live(dir string) ([]MemberState, error) {
	s, err := ReadState(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var live []MemberState
	for _, m := range s.Members {
		if m.alive() {
			live = append(live, m)
		}
	}
	return live, nil
}

// Down stops the cluster whose state is in dir, from any process: the
// services first, then MinIO, then etcd, each with SIGTERM and, after
// timeout, SIGKILL to its whole process group. Members whose process is
// gone (or was replaced by another under the same PID) are skipped.
func Down(dir string, timeout time.Duration) error {
	s, err := ReadState(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, stage := range stopBatches(s.Members) {
		var stopping []*MemberState
		for _, i := range stage {
			m := &s.Members[i]
			if m.alive() {
				if err := syscall.Kill(m.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
					errs = append(errs, fmt.Errorf("localcluster: stop %s: %w", m.Name, err))
				}
				stopping = append(stopping, m)
			}
		}
		deadline := time.Now().Add(timeout)
		for _, m := range stopping {
			for m.alive() && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			// Whatever is left of the group goes too: a member's
			// children, or the member itself after the timeout.
			if err := syscall.Kill(-m.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("localcluster: kill %s: %w", m.Name, err))
			}
			m.PID, m.StartTime = 0, 0
		}
	}
	if err := writeState(dir, s); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopBatches returns the order in which a cluster's members stop, as
// batches of indexes into members that stop together: the services, then
// MinIO, then the etcd members one at a time (a leader stopping while its
// followers do waits seconds to hand its leadership to one of them).
func stopBatches(members []MemberState) [][]int {
	var services, minio []int
	var batches [][]int
	for i, m := range members {
		switch m.Kind {
		case KindEtcd:
		case KindMinIO:
			minio = append(minio, i)
		default:
			services = append(services, i)
		}
	}
	batches = append(batches, services, minio)
	for i, m := range members {
		if m.Kind == KindEtcd {
			batches = append(batches, []int{i})
		}
	}
	return batches
}

// alive reports whether m's process still runs (and is not a zombie).
func (m *MemberState) alive() bool {
	if m.PID <= 0 {
		return false
	}
	start, state, err := procStat(m.PID)
	return err == nil && start == m.StartTime && state != "Z"
}

// procStat reads a process's start time and state from /proc.
func procStat(pid int) (start uint64, state string, err error) {
	f, err := procStatFields(pid)
	if err != nil {
		return 0, "", err
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0], err
}

// procStatFields reads the fields of /proc/<pid>/stat after the command
// name, which, in parentheses, may hold spaces: f[0] is the line's 3rd
// field (state), f[11] to f[14] its 14th to 17th (user and system time,
// its own then its reaped children's, in clock ticks), f[19] its 22nd
// (start time).
func procStatFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("localcluster: unreadable /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return nil, fmt.Errorf("localcluster: unreadable /proc/%d/stat", pid)
	}
	return f, nil
}
