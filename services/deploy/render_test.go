package deploy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// k8sDir is deploy/k8s, relative to this package.
const k8sDir = "../../deploy/k8s"

// overlay is one set of manifests the tests render: a kustomization, or
// the Helm chart with some values.
type overlay struct {
	name string // directory under deploy/k8s, or a name for chart values
	// operatorSecrets: Secrets the overlay does not create because the
	// operator provides them (documented in deploy/k8s/README.md).
	operatorSecrets bool
	// chartValues, when not nil, makes this a render of the Helm chart in
	// deploy/helm/conch with these values over its defaults.
	chartValues map[string]any
}

func (o overlay) isChart() bool { return o.chartValues != nil }

// chartSecrets are values that satisfy the chart's required secrets.
var chartSecrets = map[string]any{
	"internalSecret":       "an-internal-secret-of-32-bytes!!",
	"adminKey":             "an-admin-key-of-at-least-16-chars",
	"signingKeys":          "k1:a-signing-secret-of-at-least-32-bytes",
	"secretsKey":           "k1:YS1zZWNyZXRzLWtleS1vZi0zMi1ieXRlcy1vayEhISE=",
	"s3SecretKey":          "an-s3-secret-key",
	"workspaceS3SecretKey": "a-workspace-s3-secret",
	"auditS3SecretKey":     "an-audit-s3-secret",
	"responsesS3SecretKey": "a-responses-s3-secret",
}

// overlays are every kustomization of deploy/k8s and the chart's
// configurations that keep etcd and MinIO in the release; all of them are
// held to every invariant of this package.
var overlays = []overlay{
	{name: "."},
	{name: "base", operatorSecrets: true},
	{name: "overlays/dev"},
	{name: "overlays/prod", operatorSecrets: true},
	{name: "helm", chartValues: map[string]any{"secrets": chartSecrets}},
	{name: "helm/operator-secrets", operatorSecrets: true, chartValues: map[string]any{
		"secrets": map[string]any{"create": false},
		"etcd":    map[string]any{"tls": map[string]any{"existingSecret": "conch-etcd-tls"}},
		"image":   map[string]any{"tag": "v1.2.3"},
		"router":  map[string]any{"replicas": 3, "autoscaling": map[string]any{"minReplicas": 3, "maxReplicas": 8}},
		"executor": map[string]any{
			"replicas": 4, "autoscaling": map[string]any{"minReplicas": 2, "maxReplicas": 10},
			"rootfs": map[string]any{"image": "conch-sandbox:v7-with-tools", "sizeLimit": "4Gi"},
		},
	}},
}

// workload is a Deployment, a StatefulSet or a Job, seen through what the
// checks need. A Job has no selector of its own.
type workload struct {
	kind, name  string
	annotations map[string]string
	replicas    int32
	// serviceName is a StatefulSet's governing Service.
	serviceName string
	selector    *metav1.LabelSelector
	template    *corev1.PodTemplateSpec
}

func (w *workload) String() string { return w.kind + "/" + w.name }

// containers returns the init and regular containers of w's pods.
func (w *workload) containers() []corev1.Container {
	return slices.Concat(w.template.Spec.InitContainers, w.template.Spec.Containers)
}

// manifests is one rendered overlay, decoded.
type manifests struct {
	overlay   overlay
	objects   []runtime.Object
	workloads []*workload
	services  []*corev1.Service
	secrets   map[string]*corev1.Secret
	policies  []*networkingv1.NetworkPolicy
	pdbs      []*policyv1.PodDisruptionBudget
	hpas      []*autoscalingv2.HorizontalPodAutoscaler
	ingresses []*networkingv1.Ingress
	// serviceMonitors are the Prometheus Operator's, as decoded YAML.
	serviceMonitors []map[string]any
}

// workload returns the workload kind/name, or nil.
func (m *manifests) workload(kind, name string) *workload {
	for _, w := range m.workloads {
		if w.kind == kind && w.name == name {
			return w
		}
	}
	return nil
}

// service returns the Service name, or nil.
func (m *manifests) service(name string) *corev1.Service {
	for _, s := range m.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// selected returns the workloads whose pods sel selects.
func (m *manifests) selected(t *testing.T, sel *metav1.LabelSelector) []*workload {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("label selector %v: %v", sel, err)
	}
	var out []*workload
	for _, w := range m.workloads {
		if s.Matches(labels.Set(w.template.Labels)) {
			out = append(out, w)
		}
	}
	return out
}

// scheme knows every kind the manifests may hold; anything else fails to
// decode, so a typo in apiVersion or kind cannot slip through.
func scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
		autoscalingv2.AddToScheme, networkingv1.AddToScheme, batchv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// render builds an overlay with kustomize, or the chart with Helm, and
// decodes every object strictly: unknown or duplicated fields are errors.
func render(o overlay) (*manifests, error) {
	docs, err := renderYAML(o)
	if err != nil {
		return nil, err
	}
	s, err := scheme()
	if err != nil {
		return nil, err
	}
	codec := json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Yaml: true, Strict: true})
	m := &manifests{overlay: o, secrets: map[string]*corev1.Secret{}}
	for _, d := range docs {
		y := d.yaml
		if kind, err := kindOf(y); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", o.name, d.id, err)
		} else if kind == "monitoring.coreos.com/v1/ServiceMonitor" {
			// A CRD, outside the scheme: its checks read it as a map.
			var sm map[string]any
			if err := yaml.Unmarshal(y, &sm); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", o.name, d.id, err)
			}
			m.serviceMonitors = append(m.serviceMonitors, sm)
			continue
		}
		obj, _, err := codec.Decode(y, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: decode %s: %w", o.name, d.id, err)
		}
		m.objects = append(m.objects, obj)
		switch v := obj.(type) {
		case *appsv1.Deployment:
			m.workloads = append(m.workloads, &workload{kind: "Deployment", name: v.Name, replicas: replicas(v.Spec.Replicas), selector: v.Spec.Selector, template: &v.Spec.Template})
		case *appsv1.StatefulSet:
			m.workloads = append(m.workloads, &workload{kind: "StatefulSet", name: v.Name, serviceName: v.Spec.ServiceName, replicas: replicas(v.Spec.Replicas), selector: v.Spec.Selector, template: &v.Spec.Template})
		case *batchv1.Job:
			m.workloads = append(m.workloads, &workload{kind: "Job", name: v.Name, annotations: v.Annotations, replicas: 1, template: &v.Spec.Template})
		case *corev1.Service:
			m.services = append(m.services, v)
		case *corev1.Secret:
			m.secrets[v.Name] = v
		case *networkingv1.NetworkPolicy:
			m.policies = append(m.policies, v)
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, v)
		case *autoscalingv2.HorizontalPodAutoscaler:
			m.hpas = append(m.hpas, v)
		case *networkingv1.Ingress:
			m.ingresses = append(m.ingresses, v)
		case *corev1.Namespace:
		default:
			return nil, fmt.Errorf("%s: %s: kind %T has no checks; add them before adding the kind", o.name, d.id, obj)
		}
	}
	return m, nil
}

// doc is one rendered object's YAML and what names it in messages.
type doc struct {
	id   string
	yaml []byte
}

// renderYAML renders o into one YAML document per object.
func renderYAML(o overlay) ([]doc, error) {
	if o.isChart() {
		return renderChart(o.name, o.chartValues)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(k8sDir, filepath.FromSlash(o.name)))
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", o.name, err)
	}
	var out []doc
	for _, r := range resMap.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", o.name, r.CurId(), err)
		}
		out = append(out, doc{id: r.CurId().String(), yaml: y})
	}
	return out, nil
}

// kindOf is a document's apiVersion/kind.
func kindOf(y []byte) (string, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(y, &tm); err != nil {
		return "", err
	}
	return tm.APIVersion + "/" + tm.Kind, nil
}

// replicas is a workload's replica count; nil means the API default, 1.
func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

var rendered sync.Map // overlay name → func() (*manifests, error)

// load renders o once per test binary; the tests share the result.
func load(t *testing.T, o overlay) *manifests {
	t.Helper()
	f, _ := rendered.LoadOrStore(o.name, sync.OnceValues(func() (*manifests, error) { return render(o) }))
	m, err := f.(func() (*manifests, error))()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// eachOverlay runs check as a parallel subtest per overlay.
func eachOverlay(t *testing.T, check func(t *testing.T, m *manifests)) {
	t.Parallel()
	for _, o := range overlays {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			check(t, load(t, o))
		})
	}
}

// containerPort finds the port of c that p names or numbers.
func containerPort(c *corev1.Container, p string) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if cp.Name == p || fmt.Sprint(cp.ContainerPort) == p {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

// podPort finds the container port of a pod that p names or numbers.
func podPort(spec *corev1.PodSpec, p string) (corev1.ContainerPort, bool) {
	for i := range spec.Containers {
		if cp, ok := containerPort(&spec.Containers[i], p); ok {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

// imageName is an image reference without its tag or digest.
func imageName(image string) string {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	return name
}
