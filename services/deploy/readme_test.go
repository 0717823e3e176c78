package deploy

import (
	"bytes"
	"encoding/base64"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/strvals"
	corev1 "k8s.io/api/core/v1"
)

// deployGuide is the deploy how-to, whose commands this package checks.
const deployGuide = "docs/how-to/deploy.md"

// readmeDeploy is the command lines of the deploy guide, with continued
// lines joined.
func readmeDeploy(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../" + deployGuide)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	var cmds []string
	cont := false
	for _, line := range strings.Split(s, "\n") {
		code, ok := strings.CutPrefix(line, "    ")
		if !ok {
			cont = false
			continue
		}
		code = strings.TrimSpace(code)
		if cont {
			cmds[len(cmds)-1] += " " + strings.TrimSuffix(code, `\`)
		} else {
			cmds = append(cmds, strings.TrimSuffix(code, `\`))
		}
		cont = strings.HasSuffix(code, `\`)
	}
	return cmds
}

// shellSubst stands for the $(…) substitutions of the guide's commands.
var shellSubst = regexp.MustCompile(`\$\(openssl rand -(hex|base64) (\d+)\)`)

// TestReadmeDeployCommands holds each command of the deploy guide
// (docs/how-to/deploy.md) to what the tests check: the kustomizations it
// applies are rendered here, the chart values it sets render and are the ones
// the tested chart render sets, the Compose file and secrets script are the
// ones checked here and run by make images-test, and the make targets exist.
// A command this test does not know fails it.
func TestReadmeDeployCommands(t *testing.T) {
	t.Parallel()
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	services := loadCompose(t)
	seen := map[string]bool{}
	for _, cmd := range readmeDeploy(t) {
		f := strings.Fields(cmd)
		switch {
		case f[0] == "make":
			seen["make"] = true
			for _, target := range f[1:] {
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).Match(makefile) {
					t.Errorf(deployGuide+": %q: the Makefile has no target %s", cmd, target)
				}
			}
		case len(f) == 4 && f[0] == "kubectl" && f[1] == "apply" && f[2] == "-k":
			seen["kustomize"] = true
			dir, ok := strings.CutPrefix(f[3], "deploy/k8s")
			dir = strings.TrimPrefix(dir, "/")
			if dir == "" {
				dir = "."
			}
			if !ok || !slices.ContainsFunc(overlays, func(o overlay) bool { return !o.isChart() && o.name == dir }) {
				t.Errorf(deployGuide+": %q applies a kustomization this package does not render", cmd)
			}
		case strings.HasPrefix(cmd, "kubectl -n conch port-forward svc/router "):
			m := load(t, overlays[0])
			svc := m.service("router")
			_, port, _ := strings.Cut(f[len(f)-1], ":")
			if svc == nil || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == atoi(port) }) {
				t.Errorf(deployGuide+": %q: the router Service has no port %s", cmd, port)
			}
		case f[0] == "helm" && f[1] == "install":
			seen["helm"] = true
			checkReadmeHelm(t, cmd, f)
		case f[0] == "docker" && f[1] == "compose", f[0] == "podman-compose":
			seen["compose"] = true
			i := slices.Index(f, "-f")
			if i < 0 || f[i+1] != "deploy/compose/compose.yaml" {
				t.Errorf(deployGuide+": %q does not name deploy/compose/compose.yaml", cmd)
				continue
			}
			for _, svc := range f[slices.Index(f, "up")+1:] {
				if _, ok := services[svc]; !ok && !strings.HasPrefix(svc, "-") {
					t.Errorf(deployGuide+": %q names service %s, which compose.yaml does not have", cmd, svc)
				}
			}
		case cmd == "deploy/compose/secrets.sh":
			// TestComposeFlagsAreAccepted runs it.
		case strings.HasPrefix(cmd, "export CONCH_API_KEY=$(sed -n 's/^CONCH_ADMIN_KEY=//p' deploy/compose/secrets/router.env)"):
			// The key secrets.sh writes; TestComposeFlagsAreAccepted reads it.
		case f[0] == "bin/conch":
			// Client commands: make images-test runs them against the Compose cluster.
		default:
			t.Errorf(deployGuide+": runs %q, which this test does not check; add a case", cmd)
		}
	}
	for _, want := range []string{"make", "kustomize", "helm", "compose"} {
		if !seen[want] {
			t.Errorf(deployGuide+": has no %s command", want)
		}
	}
}

// checkReadmeHelm renders the chart with the values the guide's helm
// install sets: they must be what the tested "helm" render sets.
func checkReadmeHelm(t *testing.T, cmd string, f []string) {
	t.Helper()
	if len(f) < 4 || f[3] != "deploy/helm/conch" || !slices.Contains(f, "--namespace") || f[slices.Index(f, "--namespace")+1] != namespace {
		t.Errorf(deployGuide+": %q: want helm install NAME deploy/helm/conch --namespace %s", cmd, namespace)
		return
	}
	values := map[string]any{}
	for i, a := range f {
		if a != "--set" || i+1 >= len(f) {
			continue
		}
		set := shellSubst.ReplaceAllStringFunc(f[i+1], func(m string) string {
			sub := shellSubst.FindStringSubmatch(m)
			n := int(atoi(sub[2]))
			if sub[1] == "base64" {
				return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, n))
			}
			return strings.Repeat("ab", n)
		})
		if err := strvals.ParseInto(set, values); err != nil {
			t.Errorf(deployGuide+": %q: --set %s: %v", cmd, f[i+1], err)
		}
	}
	if _, err := renderChart("helm/readme", values); err != nil {
		t.Errorf(deployGuide+": %q does not render: %v", cmd, err)
	}
	set, _ := values["secrets"].(map[string]any)
	var got, want []string
	for k := range set {
		got = append(got, k)
	}
	for k := range chartSecrets {
		want = append(want, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf(deployGuide+": %q sets secrets %v; the tested render sets %v", cmd, got, want)
	}
}

// atoi is s as a number, or -1.
func atoi(s string) int32 {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return int32(n)
}
