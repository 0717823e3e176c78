package deploy

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/launch"
)

// commandConfigs maps each conch subcommand a manifest runs to the
// configuration it loads, as services/cmd/conch/main.go does;
// TestCommandConfigsMatchMain keeps the two in step.
var commandConfigs = map[string]func() any{
	"router":     func() any { return &launch.RouterConfig{} },
	"approval":   func() any { return &launch.ApprovalConfig{} },
	"workspace":  func() any { return &launch.WorkspaceConfig{} },
	"executor":   func() any { return &launch.ExecutorConfig{} },
	"etcd":       func() any { return &launch.EtcdConfig{} },
	"etcd-pki":   func() any { return &launch.EtcdPKIConfig{} },
	"etcd-auth":  func() any { return &launch.EtcdAuthConfig{} },
	"minio-auth": func() any { return &launch.MinIOAuthConfig{} },
}

// sidecars are the commands that run beside another program in its pod
// to keep it set up: they serve nothing (no port, no probe) and use no
// etcd.
var sidecars = map[string]bool{"minio-auth": true}

// isSidecar reports whether c runs one of the sidecars.
func isSidecar(c *corev1.Container) bool {
	return conchImages[path.Base(imageName(c.Image))] && len(c.Args) > 0 && sidecars[c.Args[0]]
}

// conchImages are the images whose entrypoint is the conch binary, by the
// last part of their name (an overlay may map them to any registry).
var conchImages = map[string]bool{"conch": true, "conch-executor": true}

func TestCommandConfigsMatchMain(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../cmd/conch/main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// case "x", "y": var cfg launch.T
	inMain := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		cc, ok := n.(*ast.CaseClause)
		if !ok {
			return true
		}
		typ := ""
		for _, st := range cc.Body {
			ds, ok := st.(*ast.DeclStmt)
			if !ok {
				continue
			}
			for _, spec := range ds.Decl.(*ast.GenDecl).Specs {
				if vs, ok := spec.(*ast.ValueSpec); ok {
					if sel, ok := vs.Type.(*ast.SelectorExpr); ok {
						if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "launch" {
							typ = sel.Sel.Name
						}
					}
				}
			}
		}
		for _, e := range cc.List {
			if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				cmd, _ := strconv.Unquote(lit.Value)
				inMain[cmd] = typ
			}
		}
		return true
	})
	for cmd, newCfg := range commandConfigs {
		want := reflect.TypeOf(newCfg()).Elem().Name()
		if got, ok := inMain[cmd]; !ok || got != want {
			t.Errorf("main.go loads launch.%s for %q, this test launch.%s: update commandConfigs", got, cmd, want)
		}
	}
}

// kubeVar is Kubernetes' $(VAR) reference in args.
var kubeVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// fieldStandIns are the values downward-API fields get in these checks.
var fieldStandIns = map[string]string{"status.podIP": "10.0.0.7", "metadata.name": "pod-0", "metadata.namespace": namespace}

// containerEnv resolves a container's environment as the kubelet would:
// literal values, Secrets (rendered or the documented examples) and
// downward-API fields (stand-in values).
func containerEnv(t *testing.T, m *manifests, c *corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = kubeVar.ReplaceAllStringFunc(e.Value, func(s string) string {
				if v, ok := env[s[2:len(s)-1]]; ok {
					return v
				}
				return s
			})
		case e.ValueFrom.SecretKeyRef != nil:
			v, err := secretValue(m, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
			if err != nil {
				t.Errorf("container %s env %s: %v", c.Name, e.Name, err)
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil:
			v, ok := fieldStandIns[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Errorf("container %s env %s: field %s has no stand-in value here", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		default:
			t.Errorf("container %s env %s: unsupported source", c.Name, e.Name)
		}
	}
	return env
}

// conchCommand is a container that runs a conch service.
type conchCommand struct {
	w     *workload
	c     *corev1.Container
	cmd   string
	args  []string          // after the subcommand, $(VAR)s expanded
	flags map[string]string // --name=value in args
	env   map[string]string
}

func conchCommands(t *testing.T, m *manifests) []conchCommand {
	t.Helper()
	var out []conchCommand
	for _, w := range m.workloads {
		for i := range w.template.Spec.Containers {
			c := &w.template.Spec.Containers[i]
			if !conchImages[path.Base(imageName(c.Image))] {
				continue
			}
			if len(c.Command) > 0 || len(c.Args) == 0 {
				t.Errorf("%s container %s: want the image's conch entrypoint and a subcommand in args", w, c.Name)
				continue
			}
			cc := conchCommand{w: w, c: c, cmd: c.Args[0], flags: map[string]string{}, env: containerEnv(t, m, c)}
			for _, a := range c.Args[1:] {
				a = kubeVar.ReplaceAllStringFunc(a, func(s string) string {
					if v, ok := cc.env[s[2:len(s)-1]]; ok {
						return v
					}
					t.Errorf("%s container %s: arg %s refers to an undefined variable", w, c.Name, a)
					return s
				})
				cc.args = append(cc.args, a)
				if name, value, ok := strings.Cut(strings.TrimLeft(a, "-"), "="); ok && strings.HasPrefix(a, "--") {
					cc.flags[name] = value
				} else {
					t.Errorf("%s container %s: arg %q: write flags as --name=value", w, c.Name, a)
				}
			}
			out = append(out, cc)
		}
	}
	return out
}

func TestConchFlagsAreAccepted(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		cmds := conchCommands(t, m)
		ran := map[string]bool{}
		for _, cc := range cmds {
			newCfg, ok := commandConfigs[cc.cmd]
			if !ok {
				t.Errorf("%s container %s runs `conch %s`, which is not a service command", cc.w, cc.c.Name, cc.cmd)
				continue
			}
			ran[cc.cmd] = true
			// Every flag must be one the command defines, and the whole
			// configuration (flags and environment) must pass the
			// command's own validation.
			fs := flag.NewFlagSet("conch "+cc.cmd, flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			if err := config.Register(fs, newCfg()); err != nil {
				t.Fatal(err)
			}
			for name := range cc.flags {
				if fs.Lookup(name) == nil {
					t.Errorf("%s container %s: conch %s has no flag --%s", cc.w, cc.c.Name, cc.cmd, name)
				}
			}
			lookup := func(k string) (string, bool) { v, ok := cc.env[k]; return v, ok }
			if err := config.LoadWith(fs, cc.args, newCfg(), lookup); err != nil {
				t.Errorf("%s container %s: conch %s rejects its configuration: %v", cc.w, cc.c.Name, cc.cmd, err)
			}
		}
		for _, svc := range services {
			if !ran[svc] {
				t.Errorf("no container runs `conch %s`", svc)
			}
		}
	})
}

func TestConchPortsMatchFlags(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		for _, cc := range conchCommands(t, m) {
			if cc.w.kind == "Job" || sidecars[cc.cmd] {
				continue // serves nothing
			}
			where := fmt.Sprintf("%s container %s", cc.w, cc.c.Name)
			port := func(flagName string) string {
				_, p, err := net.SplitHostPort(cc.flags[flagName])
				if err != nil {
					t.Errorf("%s: --%s=%q: %v", where, flagName, cc.flags[flagName], err)
				}
				return p
			}
			grpcPort := port("grpc-addr")
			// Other services dial the address registered in etcd: this pod's
			// IP and the gRPC port.
			if host, p, err := net.SplitHostPort(cc.flags["advertise-addr"]); err != nil || p != grpcPort || net.ParseIP(host) == nil {
				t.Errorf("%s: --advertise-addr=%q, want $(POD_IP):%s with POD_IP from status.podIP", where, cc.flags["advertise-addr"], grpcPort)
			}
			declared := map[string]string{"grpc": grpcPort}
			if cc.cmd == "router" {
				declared["http"] = port("http-addr")
			} else {
				declared["metrics"] = port("metrics-addr")
			}
			for name, p := range declared {
				cp, ok := containerPort(cc.c, name)
				if !ok || fmt.Sprint(cp.ContainerPort) != p {
					t.Errorf("%s: container port %q is %v, want %s from the flags", where, name, cp.ContainerPort, p)
				}
			}
			// gRPC health is served on --grpc-addr; the router's /readyz on
			// --http-addr.
			for kind, p := range map[string]*corev1.Probe{"startup": cc.c.StartupProbe, "readiness": cc.c.ReadinessProbe, "liveness": cc.c.LivenessProbe} {
				if p == nil {
					continue
				}
				got, _ := probePort(p)
				if cp, ok := containerPort(cc.c, got); ok {
					got = fmt.Sprint(cp.ContainerPort)
				}
				switch {
				case p.GRPC != nil && got != grpcPort:
					t.Errorf("%s: %s gRPC probe on port %s, but --grpc-addr listens on %s", where, kind, got, grpcPort)
				case p.HTTPGet != nil && (cc.cmd != "router" || got != declared["http"]):
					t.Errorf("%s: %s HTTP probe on port %s; only the router serves HTTP health, on --http-addr", where, kind, got)
				case p.TCPSocket != nil:
					t.Errorf("%s: %s probe is a TCP check; conch serves gRPC health", where, kind)
				}
			}
			// The pod must outlive the service's own orderly shutdown.
			var need time.Duration
			for _, f := range []string{"shutdown-timeout", "drain-delay"} {
				if v, ok := cc.flags[f]; ok {
					d, err := time.ParseDuration(v)
					if err != nil {
						t.Errorf("%s: --%s: %v", where, f, err)
					}
					need += d
				}
			}
			grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
			if g := cc.w.template.Spec.TerminationGracePeriodSeconds; g != nil {
				grace = *g
			}
			if time.Duration(grace)*time.Second <= need {
				t.Errorf("%s: terminationGracePeriodSeconds %d does not cover --shutdown-timeout plus --drain-delay (%s)", where, grace, need)
			}
		}
	})
}

func TestEtcdEndpointsAreMembers(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		etcd := m.workload("StatefulSet", "etcd")
		if etcd == nil {
			t.Fatal("no etcd StatefulSet")
		}
		var member *corev1.Container
		for i := range etcd.template.Spec.Containers {
			if etcd.template.Spec.Containers[i].Name == "etcd" {
				member = &etcd.template.Spec.Containers[i]
			}
		}
		if member == nil {
			t.Fatal("etcd StatefulSet has no etcd container")
		}
		client, okClient := containerPort(member, "client")
		peer, okPeer := containerPort(member, "peer")
		if !okClient || !okPeer {
			t.Fatal("etcd container must declare its client and peer ports")
		}
		// Members are reached by their stable names under the StatefulSet's
		// headless Service.
		serviceName := etcd.serviceName
		if svc := m.service(serviceName); svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("etcd's serviceName %q is not a headless Service that publishes unready members", serviceName)
		}
		members := map[string]bool{}
		var initial []string
		for i := range etcd.replicas {
			pod := fmt.Sprintf("%s-%d", etcd.name, i)
			host := pod + "." + serviceName
			members[net.JoinHostPort(host, fmt.Sprint(client.ContainerPort))] = true
			initial = append(initial, fmt.Sprintf("%s=https://%s.$(POD_NAMESPACE).svc:%d", pod, host, peer.ContainerPort))
		}
		// The bootstrap member list must name exactly the StatefulSet's pods.
		want := "--initial-cluster=" + strings.Join(initial, ",")
		if !slices.Contains(member.Args, want) {
			t.Errorf("etcd args lack %s", want)
		}
		for _, cc := range conchCommands(t, m) {
			if sidecars[cc.cmd] {
				continue
			}
			eps := strings.Split(cc.flags["etcd-endpoints"], ",")
			if len(eps) != int(etcd.replicas) {
				t.Errorf("%s: --etcd-endpoints lists %d members, etcd has %d", cc.w, len(eps), etcd.replicas)
			}
			for _, ep := range eps {
				ep, ok := strings.CutPrefix(ep, "https://")
				if !ok || !members[ep] {
					t.Errorf("%s: --etcd-endpoints entry %q is not an etcd member's client address", cc.w, ep)
				}
			}
		}
	})
}
