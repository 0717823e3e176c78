package deploy

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// chartDir is deploy/helm/conch, relative to this package.
const chartDir = "../../deploy/helm/conch"

// renderChart renders the chart as `helm template --namespace conch`
// would, with values over its defaults.
func renderChart(name string, values map[string]any) ([]doc, error) {
	chart, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("%s: load chart: %w", name, err)
	}
	opts := chartutil.ReleaseOptions{Name: "conch", Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := chartutil.ToRenderValues(chart, cloneValues(values), opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("%s: values: %w", name, err)
	}
	files, err := engine.Render(chart, rv)
	if err != nil {
		return nil, fmt.Errorf("%s: render: %w", name, err)
	}
	// Files in a stable order, as helm prints them.
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	var out []doc
	for _, f := range names {
		if path.Ext(f) != ".yaml" {
			continue
		}
		for i, part := range strings.Split(files[f], "\n---") {
			if strings.TrimSpace(stripComments(part)) == "" {
				continue
			}
			out = append(out, doc{id: fmt.Sprintf("%s#%d", f, i), yaml: []byte(part)})
		}
	}
	return out, nil
}

// cloneValues copies values' nested maps: Helm merges the chart's defaults
// into the maps it is given, and the tests share theirs (chartSecrets, which
// TestReadmeDeployCommands compares with docs/how-to/deploy.md).
func cloneValues(values map[string]any) map[string]any {
	out := make(map[string]any, len(values))
	for k, v := range values {
		if m, ok := v.(map[string]any); ok {
			v = cloneValues(m)
		}
		out[k] = v
	}
	return out
}

// stripComments drops YAML comment lines, to tell an empty document.
func stripComments(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// TestHelmLint is `helm lint --strict` with the values the other tests
// render: any error or warning fails.
func TestHelmLint(t *testing.T) {
	t.Parallel()
	for _, o := range overlays {
		if !o.isChart() {
			continue
		}
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			res := lint.All(chartDir, cloneValues(o.chartValues), namespace, true)
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestHelmExternalStores renders the chart with etcd and MinIO outside the
// release, an Ingress and a ServiceMonitor: the services use the given
// endpoints, nothing of the bundled stores is left, and the optional
// objects point at the routers.
func TestHelmExternalStores(t *testing.T) {
	t.Parallel()
	endpoints := []any{"etcd-a.db:2379", "etcd-b.db:2379", "etcd-c.db:2379"}
	m, err := render(overlay{name: "helm/external", chartValues: map[string]any{
		"secrets": chartSecrets,
		"etcd":    map[string]any{"bundled": false, "endpoints": endpoints, "tls": map[string]any{"existingSecret": "external-etcd-tls"}},
		"minio":   map[string]any{"bundled": false, "endpoint": "s3.example:443"},
		"ingress": map[string]any{"enabled": true, "host": "conch.example.org", "className": "nginx", "tlsSecret": "conch-tls"},
		"serviceMonitor": map[string]any{
			"enabled": true, "labels": map[string]any{"release": "prometheus"},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"etcd", "minio"} {
		if w := m.workload("StatefulSet", name); w != nil {
			t.Errorf("%s is rendered though it is external", w)
		}
		for _, p := range m.policies {
			if p.Name == name {
				t.Errorf("NetworkPolicy %s is rendered though %s is external", p.Name, name)
			}
		}
	}
	ran := 0
	for _, cc := range conchCommands(t, m) {
		ran++
		if got, want := cc.flags["etcd-endpoints"], "etcd-a.db:2379,etcd-b.db:2379,etcd-c.db:2379"; got != want {
			t.Errorf("%s: --etcd-endpoints=%s, want %s", cc.w, got, want)
		}
		for _, k := range []string{"CONCH_S3_ENDPOINT", "CONCH_AUDIT_S3_ENDPOINT", "CONCH_RESPONSES_S3_ENDPOINT"} {
			if v, ok := cc.env[k]; ok && v != "s3.example:443" {
				t.Errorf("%s: %s=%s, want the external endpoint", cc.w, k, v)
			}
		}
	}
	if ran != len(services)+1 {
		t.Errorf("%d conch containers, want one per service and etcd-auth's", ran)
	}
	// Services still reach the stores: an egress rule for each port.
	for _, w := range m.workloads {
		need := map[int32]bool{2379: true}
		if _, ok := minioUserVars[w.name]; ok {
			need[9000] = true
		}
		for port := range need {
			if !egressTo(m, w.name, port) {
				t.Errorf("%s has no egress rule to port %d of the external store", w, port)
			}
		}
	}
	if len(m.ingresses) != 1 {
		t.Fatalf("%d Ingresses, want 1", len(m.ingresses))
	}
	ing := m.ingresses[0]
	rule := ing.Spec.Rules[0]
	backend := rule.HTTP.Paths[0].Backend.Service
	svc := m.service(backend.Name)
	if rule.Host != "conch.example.org" || svc == nil || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == backend.Port.Name }) {
		t.Errorf("Ingress %s does not route conch.example.org to the router Service's port: %+v", ing.Name, rule)
	}
	if len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "conch-tls" || ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" {
		t.Errorf("Ingress %s: tls %+v, class %v", ing.Name, ing.Spec.TLS, ing.Spec.IngressClassName)
	}
	if len(m.serviceMonitors) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(m.serviceMonitors))
	}
	sm := m.serviceMonitors[0]
	if lbl := dig(sm, "metadata", "labels", "release"); lbl != "prometheus" {
		t.Errorf("ServiceMonitor labels lack release=prometheus: %v", dig(sm, "metadata", "labels"))
	}
	sel, _ := dig(sm, "spec", "selector", "matchLabels").(map[string]any)
	if svc == nil || len(sel) == 0 {
		t.Fatal("ServiceMonitor selects nothing")
	}
	for k, v := range sel {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %s=%v does not match the router Service's labels %v", k, v, svc.Labels)
		}
	}
	eps, _ := dig(sm, "spec", "endpoints").([]any)
	if len(eps) != 1 || dig(eps[0].(map[string]any), "port") != "http" || dig(eps[0].(map[string]any), "path") != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %v, want the router's http port at /metrics", eps)
	}
}

// TestHelmRequiresSecrets: a chart that makes its Secrets refuses to
// render without their values rather than render empty keys.
func TestHelmRequiresSecrets(t *testing.T) {
	t.Parallel()
	_, err := renderChart("helm/no-secrets", map[string]any{})
	if err == nil || !strings.Contains(err.Error(), "secrets.internalSecret is required") {
		t.Errorf("render without secrets: %v, want the missing value named", err)
	}
}

// egressTo reports whether some NetworkPolicy lets workload name's pods
// send to port, at any address.
func egressTo(m *manifests, name string, port int32) bool {
	for _, p := range m.policies {
		sel := p.Spec.PodSelector.MatchLabels
		if len(sel) > 0 && sel["app.kubernetes.io/name"] != name {
			continue
		}
		if !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			continue
		}
		for _, r := range p.Spec.Egress {
			for _, pp := range r.Ports {
				if pp.Port != nil && pp.Port.IntValue() == int(port) {
					return true
				}
			}
		}
	}
	return false
}

// dig walks nested maps.
func dig(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// TestHelmSandboxStorage: executor.storage.hostPath gives the executor
// its sandboxes' btrfs storage from the node; without it, nothing of it
// is rendered and sandboxes keep their files in memory.
func TestHelmSandboxStorage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, hostPath string
	}{{"in memory", ""}, {"on btrfs", "/var/lib/conch-sandboxes"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := render(overlay{name: "helm/storage", chartValues: map[string]any{
				"secrets":  chartSecrets,
				"executor": map[string]any{"storage": map[string]any{"hostPath": tc.hostPath}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			w := m.workload("Deployment", "executor")
			if w == nil {
				t.Fatal("no executor Deployment")
			}
			var env, mount string
			for _, c := range w.template.Spec.Containers {
				for _, e := range c.Env {
					if e.Name == "CONCH_SANDBOX_STORAGE" {
						env = e.Value
					}
				}
				for _, vm := range c.VolumeMounts {
					if vm.Name == "storage" {
						mount = vm.MountPath
					}
				}
			}
			var host string
			for _, v := range w.template.Spec.Volumes {
				if v.Name == "storage" && v.HostPath != nil {
					host = v.HostPath.Path
				}
			}
			if tc.hostPath == "" {
				if env != "" || mount != "" || host != "" {
					t.Fatalf("storage rendered without a hostPath: env %q, mount %q, volume %q", env, mount, host)
				}
				return
			}
			if host != tc.hostPath || mount == "" || env != mount {
				t.Fatalf("env %q, mount %q, volume %q; want the node's %s mounted where the executor's storage is", env, mount, host, tc.hostPath)
			}
		})
	}
}
