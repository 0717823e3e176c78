package deploy

import (
	"flag"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/launch"
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
	DependsOn   map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
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
		if cmd == "etcd" || cmd == "etcd-pki" || cmd == "minio-auth" {
			continue
		}
		for _, ep := range strings.Split(env["CONCH_ETCD_ENDPOINTS"], ",") {
			hostPort, _ := strings.CutPrefix(ep, "https://")
			host, _, _ := net.SplitHostPort(hostPort)
			member, ok := loadCompose(t)[host]
			if !ok || len(member.Command) == 0 || member.Command[0] != "etcd" || !slices.Contains(member.Command, "--listen-client="+ep) {
				t.Errorf("service %s: etcd endpoint %s is not a member's https client URL", name, ep)
			}
		}
	}
	want := map[string]int{"etcd": 3, "router": 2, "executor": 2, "approval": 1, "workspace": 1, "etcd-pki": 1, "etcd-auth": 1, "minio-auth": 1}
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
	data := map[string][]string{} // service → where its writable volumes are
	for name, svc := range loadCompose(t) {
		for _, v := range svc.Volumes {
			src, dst, _ := strings.Cut(v, ":")
			dst, mode, _ := strings.Cut(dst, ":")
			if strings.HasPrefix(src, "/") || strings.HasPrefix(src, ".") || strings.HasPrefix(src, "~") {
				t.Errorf("service %s mounts host path %s", name, src)
			}
			if mode != "ro" {
				data[name] = append(data[name], dst)
			}
		}
		if len(svc.Command) > 0 && svc.Command[0] == "etcd" {
			dir := ""
			for _, a := range svc.Command {
				if d, ok := strings.CutPrefix(a, "--data-dir="); ok {
					dir = d
				}
			}
			if !slices.ContainsFunc(data[name], func(v string) bool { return strings.HasPrefix(dir, v+"/") }) {
				t.Errorf("etcd service %s keeps --data-dir=%s outside its volumes %q", name, dir, data[name])
			}
		}
	}
	if minio := loadCompose(t)["minio"]; len(data["minio"]) != 1 || !slices.Contains(minio.Command, data["minio"][0]) {
		t.Errorf("minio serves %v, not its volume %q", minio.Command, data["minio"])
	}
}

// TestComposeEtcdTLS: the etcd-pki service makes the certificates into a
// volume before the members start; every member serves clients and peers
// over TLS only, with the member certificate valid for its names; every
// other conch process reaches etcd over https with its own certificate,
// read-only from that volume, whose user is its own; etcd-auth runs as
// root once the members run, and the services start only after it.
func TestComposeEtcdTLS(t *testing.T) {
	t.Parallel()
	svcs := loadCompose(t)
	pkiSvc, ok := svcs["etcd-pki"]
	if !ok || len(pkiSvc.Command) == 0 || pkiSvc.Command[0] != "etcd-pki" {
		t.Fatal("no service etcd-pki runs `conch etcd-pki`")
	}
	pkiFlags := composeFlags(pkiSvc.Command[1:])
	var volume string
	for _, v := range pkiSvc.Volumes {
		if src, dst, _ := strings.Cut(v, ":"); dst == pkiFlags["dir"] {
			volume = src
		}
	}
	if volume == "" {
		t.Fatalf("etcd-pki writes --dir=%s, which is not a volume of its own", pkiFlags["dir"])
	}
	// The files, made as the service makes them.
	made := t.TempDir()
	if err := launch.RunEtcdPKI(launch.EtcdPKIConfig{Dir: made, Hosts: strings.Split(pkiFlags["hosts"], ",")}, io.Discard); err != nil {
		t.Fatal(err)
	}
	// file reads what a service finds at path: a file of the volume,
	// mounted read-only.
	file := func(name string, svc composeService, path string) []byte {
		t.Helper()
		for _, v := range svc.Volumes {
			src, rest, _ := strings.Cut(v, ":")
			dst, mode, _ := strings.Cut(rest, ":")
			rel, ok := strings.CutPrefix(path, dst+"/")
			if src != volume || !ok {
				continue
			}
			if mode != "ro" {
				t.Errorf("service %s mounts %s writable", name, volume)
			}
			b, err := os.ReadFile(filepath.Join(made, rel))
			if err != nil {
				t.Errorf("service %s: %s is no file etcd-pki makes: %v", name, path, err)
			}
			return b
		}
		t.Errorf("service %s: %s is not in volume %s", name, path, volume)
		return nil
	}
	setting := func(svc composeService, flagName, env string) string {
		if v, ok := composeFlags(svc.Command[1:])[flagName]; ok {
			return v
		}
		return svc.Environment[env]
	}
	completed := func(name string, svc composeService, dep string) {
		if svc.DependsOn[dep].Condition != "service_completed_successfully" {
			t.Errorf("service %s does not wait for %s to complete successfully", name, dep)
		}
	}
	members, seen := 0, map[string]bool{}
	for name, svc := range svcs {
		if !conchImages[imageName(svc.Image)] || len(svc.Command) == 0 {
			continue
		}
		switch cmd := svc.Command[0]; cmd {
		case "etcd-pki", "minio-auth":
		case "etcd":
			members++
			completed(name, svc, "etcd-pki")
			var hosts []string
			for _, f := range []string{"listen-client", "listen-peer"} {
				u, err := url.Parse(setting(svc, f, ""))
				if err != nil || u.Scheme != "https" {
					t.Errorf("etcd member %s: --%s=%s, want https", name, f, setting(svc, f, ""))
					continue
				}
				hosts = append(hosts, u.Hostname())
			}
			for _, a := range append(slices.Clone(svc.Command), slices.Collect(maps.Values(svc.Environment))...) {
				if strings.Contains(a, "http://") {
					t.Errorf("etcd member %s: %s is plain http", name, a)
				}
			}
			ca := file(name, svc, setting(svc, "trusted-ca-file", "CONCH_ETCD_TRUSTED_CA_FILE"))
			cert := file(name, svc, setting(svc, "cert-file", "CONCH_ETCD_CERT_FILE"))
			key := file(name, svc, setting(svc, "key-file", "CONCH_ETCD_KEY_FILE"))
			if err := etcdCert(ca, cert, key, "", hosts...); err != nil {
				t.Errorf("etcd member %s: %v", name, err)
			}
		default:
			user, ok := etcdTLSUsers[cmd]
			if !ok {
				t.Errorf("service %s: conch %s has no etcd user", name, cmd)
				continue
			}
			seen[cmd] = true
			if cmd == "etcd-auth" {
				completed(name, svc, "etcd-pki")
				for m, s := range svcs {
					if len(s.Command) > 0 && s.Command[0] == "etcd" && svc.DependsOn[m].Condition == "" {
						t.Errorf("etcd-auth does not start after member %s", m)
					}
				}
			} else {
				completed(name, svc, "etcd-auth")
			}
			for _, ep := range strings.Split(setting(svc, "etcd-endpoints", "CONCH_ETCD_ENDPOINTS"), ",") {
				if !strings.HasPrefix(ep, "https://") {
					t.Errorf("service %s: etcd endpoint %q is not https", name, ep)
				}
			}
			ca := file(name, svc, setting(svc, "etcd-ca-file", "CONCH_ETCD_CA_FILE"))
			cert := file(name, svc, setting(svc, "etcd-cert-file", "CONCH_ETCD_CERT_FILE"))
			key := file(name, svc, setting(svc, "etcd-key-file", "CONCH_ETCD_KEY_FILE"))
			if err := etcdCert(ca, cert, key, user); err != nil {
				t.Errorf("service %s: %v", name, err)
			}
		}
	}
	if members != 3 {
		t.Errorf("%d etcd members, want 3", members)
	}
	if err := etcdUsersSeen(seen); err != nil {
		t.Error(err)
	}
	if users := slices.Sorted(maps.Keys(launch.EtcdUsers)); !slices.Equal(users, []string{"approval", "executor", "router", "workspace"}) {
		t.Errorf("launch.EtcdUsers are %v: give each new user its certificate in every deployment and etcdTLSUsers", users)
	}
}

// minioUserVars are the services that keep objects in MinIO, each as its
// own MinIO user, by command, and the prefix of the variables that carry
// that user's endpoint, keys and bucket: the service reads them and
// minio-auth makes the user from the same keys and bucket.
var minioUserVars = map[string]string{
	"workspace": "CONCH_S3_",
	"approval":  "CONCH_AUDIT_S3_",
	"router":    "CONCH_RESPONSES_S3_",
}

// TestComposeMinIOUsers: only MinIO and minio-auth hold MinIO's root
// password; the workspace and approval services and the routers each hold
// keys of their own, which minio-auth makes into users limited to their
// buckets (as TestMinIOAuth shows), and start only once it has.
func TestComposeMinIOUsers(t *testing.T) {
	t.Parallel()
	secrets := t.TempDir()
	if out, err := exec.Command("../../deploy/compose/secrets.sh", secrets).CombinedOutput(); err != nil {
		t.Fatalf("secrets.sh: %v\n%s", err, out)
	}
	svcs := loadCompose(t)
	env := func(svc composeService) map[string]string {
		out := map[string]string{}
		for _, f := range svc.EnvFile {
			b, err := os.ReadFile(filepath.Join(secrets, filepath.Base(f)))
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					out[k] = v
				}
			}
		}
		maps.Copy(out, svc.Environment)
		return out
	}
	auth := env(svcs["minio-auth"])
	root := auth["MINIO_ROOT_USER"]
	if root == "" || auth["MINIO_ROOT_PASSWORD"] != env(svcs["minio"])["MINIO_ROOT_PASSWORD"] {
		t.Fatal("minio-auth does not hold MinIO's root user and password")
	}
	ran := map[string]int{}
	for name, svc := range svcs {
		e := env(svc)
		if _, ok := e["MINIO_ROOT_PASSWORD"]; ok && name != "minio" && name != "minio-auth" {
			t.Errorf("service %s holds MinIO's root password", name)
		}
		if !conchImages[imageName(svc.Image)] || len(svc.Command) == 0 {
			continue
		}
		prefix, ok := minioUserVars[svc.Command[0]]
		if !ok {
			continue
		}
		ran[svc.Command[0]]++
		key := prefix + "ACCESS_KEY"
		if e[key] == "" || e[key] == root {
			t.Errorf("service %s: %s=%q, want a user of its own", name, key, e[key])
		}
		for _, k := range []string{"ACCESS_KEY", "SECRET_KEY", "BUCKET"} {
			if e[prefix+k] == "" || e[prefix+k] != auth[prefix+k] {
				t.Errorf("service %s: %s%s is not the one minio-auth makes", name, prefix, k)
			}
		}
		if e[prefix+"ENDPOINT"] != auth["CONCH_S3_ENDPOINT"] {
			t.Errorf("service %s: %sENDPOINT=%q, minio-auth makes the users at %q", name, prefix, e[prefix+"ENDPOINT"], auth["CONCH_S3_ENDPOINT"])
		}
		if svc.DependsOn["minio-auth"].Condition != "service_completed_successfully" {
			t.Errorf("service %s does not wait for minio-auth to complete successfully", name)
		}
	}
	for cmd := range minioUserVars {
		if ran[cmd] == 0 {
			t.Errorf("no service runs `conch %s`", cmd)
		}
	}
}

// TestComposeSecretsKeepsOlderFiles: secrets.sh run again, as after an
// upgrade, on a directory an older version wrote, adds the files that
// version lacked (the routers' responses-s3.env) and leaves the others as
// they are: their keys are in MinIO, etcd and clients already.
func TestComposeSecretsKeepsOlderFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func() {
		t.Helper()
		if out, err := exec.Command("../../deploy/compose/secrets.sh", dir).CombinedOutput(); err != nil {
			t.Fatalf("secrets.sh: %v\n%s", err, out)
		}
	}
	run()
	before := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		before[e.Name()] = b
	}
	// The directory as the version before the routers' MinIO user left it.
	if err := os.Remove(filepath.Join(dir, "responses-s3.env")); err != nil {
		t.Fatal(err)
	}
	delete(before, "responses-s3.env")
	run()
	for name, b := range before {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !slices.Equal(got, b) {
			t.Errorf("%s changed on the second run (%v)", name, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "responses-s3.env"))
	if err != nil {
		t.Fatalf("the second run did not add responses-s3.env: %v", err)
	}
	if s := string(b); !strings.Contains(s, "CONCH_RESPONSES_S3_ACCESS_KEY=router\n") || !regexp.MustCompile(`(?m)^CONCH_RESPONSES_S3_SECRET_KEY=[0-9a-f]{40}$`).MatchString(s) {
		t.Errorf("responses-s3.env:\n%s\nwant the router's access key and a random secret", s)
	}
}

// composeFlags are a command's --name=value arguments.
func composeFlags(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			out[k] = v
		}
	}
	return out
}
