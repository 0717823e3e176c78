package deploy

import (
	"flag"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/conch-sh/conch/services/internal/platform/config"
)

// composeFile is deploy/compose/compose.yaml, relative to this package.
const composeFile = "../../deploy/compose/compose.yaml"

// composeService is what these checks read of a Compose service.
type composeService struct {
	Image       string            `json:"image"`
	Hostname    string            `json:"hostname"`
	Command     []string          `json:"command"`
	Environment map[string]string `json:"environment"`
	EnvFile     []string          `json:"env_file"`
	Privileged  bool              `json:"privileged"`
	Volumes     []string          `json:"volumes"`
}

// composeVar is Compose's ${VAR:-default} interpolation.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// loadCompose reads the Compose file with every variable at its default,
// as `docker compose up` without an environment would.
func loadCompose(t *testing.T) map[string]composeService {
	t.Helper()
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	b = composeVar.ReplaceAllFunc(b, func(m []byte) []byte { return composeVar.FindSubmatch(m)[3] })
	var f struct {
		Services map[string]composeService `json:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Services
}

// TestComposeFlagsAreAccepted holds every conch container of the Compose
// file to what the binary accepts: its subcommand, each flag, and the whole
// configuration (flags, environment and the env files deploy/compose/secrets.sh
// writes) passing the command's own validation.
func TestComposeFlagsAreAccepted(t *testing.T) {
	t.Parallel()
	secrets := t.TempDir()
	if out, err := exec.Command("../../deploy/compose/secrets.sh", secrets).CombinedOutput(); err != nil {
		t.Fatalf("secrets.sh: %v\n%s", err, out)
	}
	ran := map[string]int{}
	for name, svc := range loadCompose(t) {
		img := imageName(svc.Image)
		if !conchImages[img] {
			continue
		}
		if len(svc.Command) == 0 {
			t.Errorf("service %s: no subcommand", name)
			continue
		}
		cmd, args := svc.Command[0], svc.Command[1:]
		newCfg, ok := commandConfigs[cmd]
		if !ok {
			t.Errorf("service %s runs `conch %s`, which is not a service command", name, cmd)
			continue
		}
		ran[cmd]++
		env := map[string]string{}
		for _, f := range svc.EnvFile {
			b, err := os.ReadFile(filepath.Join(secrets, filepath.Base(f)))
			if err != nil {
				t.Errorf("service %s: env_file %s: %v", name, f, err)
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					env[k] = v
				}
			}
		}
		for k, v := range svc.Environment {
			env[k] = v
		}
		fs := flag.NewFlagSet("conch "+cmd, flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if err := config.Register(fs, newCfg()); err != nil {
			t.Fatal(err)
		}
		flags := map[string]string{}
		for _, a := range args {
			k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !ok || !strings.HasPrefix(a, "--") {
				t.Errorf("service %s: arg %q: write flags as --name=value", name, a)
				continue
			}
			flags[k] = v
			if fs.Lookup(k) == nil {
				t.Errorf("service %s: conch %s has no flag --%s", name, cmd, k)
			}
		}
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		if err := config.LoadWith(fs, args, newCfg(), lookup); err != nil {
			t.Errorf("service %s: conch %s rejects its configuration: %v", name, cmd, err)
		}
		// Other services dial what a service registers: its name on the
		// network, at the port it listens on.
		if adv, ok := flags["advertise-addr"]; ok {
			host, port, _ := net.SplitHostPort(adv)
			_, listen, _ := net.SplitHostPort(flags["grpc-addr"])
			if host != svc.Hostname || host != name || port != listen {
				t.Errorf("service %s: --advertise-addr=%s, want %s:%s (its hostname and --grpc-addr's port)", name, adv, name, listen)
			}
		}
		if cmd == "etcd" {
			continue
		}
		for _, ep := range strings.Split(env["CONCH_ETCD_ENDPOINTS"], ",") {
			host, port, _ := net.SplitHostPort(ep)
			member, ok := loadCompose(t)[host]
			if !ok || len(member.Command) == 0 || member.Command[0] != "etcd" || !slices.Contains(member.Command, "--listen-client=http://"+host+":"+port) {
				t.Errorf("service %s: etcd endpoint %s is not a member's client address", name, ep)
			}
		}
	}
	want := map[string]int{"etcd": 3, "router": 2, "executor": 2, "approval": 1, "workspace": 1}
	for cmd, n := range want {
		if ran[cmd] != n {
			t.Errorf("%d services run `conch %s`, want %d", ran[cmd], cmd, n)
		}
	}
}

// TestComposeImagesAreBuilt: every image the Compose file runs is one
// make images builds.
func TestComposeImagesAreBuilt(t *testing.T) {
	t.Parallel()
	built := builtImages(t)
	for name, svc := range loadCompose(t) {
		if !built[imageName(svc.Image)] {
			t.Errorf("service %s: image %s is not built by make images", name, svc.Image)
		}
	}
}

// TestComposeVolumes: etcd's and MinIO's data live in named volumes, and
// no service mounts a host path (the executors above all: a host's
// /sys/fs/cgroup would let one executor's stale-sandbox sweep judge
// another's sandboxes dead).
func TestComposeVolumes(t *testing.T) {
	t.Parallel()
	data := map[string]string{}
	for name, svc := range loadCompose(t) {
		for _, v := range svc.Volumes {
			src, dst, _ := strings.Cut(v, ":")
			dst, _, _ = strings.Cut(dst, ":")
			if strings.HasPrefix(src, "/") || strings.HasPrefix(src, ".") || strings.HasPrefix(src, "~") {
				t.Errorf("service %s mounts host path %s", name, src)
			}
			data[name] = dst
		}
		if len(svc.Command) > 0 && svc.Command[0] == "etcd" {
			dir := ""
			for _, a := range svc.Command {
				if d, ok := strings.CutPrefix(a, "--data-dir="); ok {
					dir = d
				}
			}
			if data[name] == "" || !strings.HasPrefix(dir, data[name]+"/") {
				t.Errorf("etcd service %s keeps --data-dir=%s outside its volume (%q)", name, dir, data[name])
			}
		}
	}
	if minio := loadCompose(t)["minio"]; data["minio"] == "" || !slices.Contains(minio.Command, data["minio"]) {
		t.Errorf("minio serves %v, not its volume %q", minio.Command, data["minio"])
	}
}
