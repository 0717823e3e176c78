package deploy

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// namespace is where every namespaced object must land.
const namespace = "conch"

// services are the four conch services, each its own Deployment.
var services = []string{"router", "approval", "workspace", "executor"}

func TestObjectsAreInTheNamespace(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		for _, obj := range m.objects {
			meta, ok := obj.(metav1.Object)
			if !ok {
				t.Fatalf("%T has no object metadata", obj)
			}
			if _, isNS := obj.(*corev1.Namespace); isNS {
				if meta.GetName() != namespace {
					t.Errorf("namespace %q, want only %q", meta.GetName(), namespace)
				}
				continue
			}
			if meta.GetNamespace() != namespace {
				t.Errorf("%T %s is in namespace %q, want %q", obj, meta.GetName(), meta.GetNamespace(), namespace)
			}
		}
	})
}

func TestWorkloadsAndReplicas(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		for _, name := range services {
			w := m.workload("Deployment", name)
			if w == nil {
				t.Errorf("no Deployment %s", name)
				continue
			}
			if w.replicas < 2 {
				t.Errorf("%s: %d replicas, want at least 2", w, w.replicas)
			}
		}
		if w := m.workload("StatefulSet", "etcd"); w == nil || w.replicas != 3 {
			t.Errorf("etcd: want a StatefulSet of 3 members, got %v", w)
		}
		if w := m.workload("StatefulSet", "minio"); w == nil || w.replicas < 1 {
			t.Errorf("minio: want a StatefulSet, got %v", w)
		}
	})
}

func TestSelectorsMatchTemplates(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		for _, w := range m.workloads {
			if w.kind == "Job" {
				continue // its pods run once, selected by no one
			}
			if w.selector == nil || len(w.selector.MatchLabels)+len(w.selector.MatchExpressions) == 0 {
				t.Errorf("%s: empty selector", w)
				continue
			}
			s, err := metav1.LabelSelectorAsSelector(w.selector)
			if err != nil {
				t.Errorf("%s: %v", w, err)
				continue
			}
			if !s.Matches(labels.Set(w.template.Labels)) {
				t.Errorf("%s: selector %s does not match its pod labels %v", w, s, w.template.Labels)
			}
			// Another workload's pods under this selector would be counted,
			// disrupted and load-balanced as its own.
			if got := m.selected(t, w.selector); len(got) != 1 {
				t.Errorf("%s: selector %s matches %d workloads, want only itself", w, s, len(got))
			}
		}
	})
}

func TestServicesSelectPorts(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		for _, svc := range m.services {
			sel := &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}
			ws := m.selected(t, sel)
			if len(svc.Spec.Selector) == 0 || len(ws) == 0 {
				t.Errorf("Service %s selects no workload (selector %v)", svc.Name, svc.Spec.Selector)
				continue
			}
			for _, p := range svc.Spec.Ports {
				target := p.TargetPort.String()
				if p.TargetPort.IntValue() == 0 && p.TargetPort.StrVal == "" {
					target = fmt.Sprint(p.Port)
				}
				for _, w := range ws {
					if _, ok := podPort(&w.template.Spec, target); !ok {
						t.Errorf("Service %s port %s: %s declares no container port %s", svc.Name, p.Name, w, target)
					}
				}
			}
		}
	})
}

func TestDisruptionBudgets(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		covered := map[string]bool{}
		for _, pdb := range m.pdbs {
			ws := m.selected(t, pdb.Spec.Selector)
			if len(ws) != 1 {
				t.Errorf("PodDisruptionBudget %s selects %d workloads, want 1", pdb.Name, len(ws))
				continue
			}
			w := ws[0]
			covered[w.String()] = true
			// A budget that allows no disruption blocks node drains.
			switch {
			case pdb.Spec.MinAvailable != nil && pdb.Spec.MaxUnavailable != nil:
				t.Errorf("PodDisruptionBudget %s: both minAvailable and maxUnavailable", pdb.Name)
			case pdb.Spec.MinAvailable != nil:
				if n := pdb.Spec.MinAvailable.IntValue(); pdb.Spec.MinAvailable.StrVal != "" || n >= int(w.replicas) || n < 1 {
					t.Errorf("PodDisruptionBudget %s: minAvailable %s with %d replicas; want an integer in [1, replicas)", pdb.Name, pdb.Spec.MinAvailable, w.replicas)
				}
			case pdb.Spec.MaxUnavailable != nil:
				if n := pdb.Spec.MaxUnavailable.IntValue(); pdb.Spec.MaxUnavailable.StrVal != "" || n < 1 || n >= int(w.replicas) {
					t.Errorf("PodDisruptionBudget %s: maxUnavailable %s with %d replicas; want an integer in [1, replicas)", pdb.Name, pdb.Spec.MaxUnavailable, w.replicas)
				}
			default:
				t.Errorf("PodDisruptionBudget %s sets neither minAvailable nor maxUnavailable", pdb.Name)
			}
		}
		for _, name := range append(slices.Clone(services), "etcd") {
			kind := "Deployment"
			if name == "etcd" {
				kind = "StatefulSet"
			}
			if !covered[kind+"/"+name] {
				t.Errorf("%s/%s has no PodDisruptionBudget", kind, name)
			}
		}
	})
}

func TestAutoscalers(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		scaled := map[string]bool{}
		for _, h := range m.hpas {
			ref := h.Spec.ScaleTargetRef
			w := m.workload(ref.Kind, ref.Name)
			if w == nil || ref.APIVersion != "apps/v1" {
				t.Errorf("HorizontalPodAutoscaler %s targets %s %s/%s, which is not rendered", h.Name, ref.APIVersion, ref.Kind, ref.Name)
				continue
			}
			scaled[ref.Name] = true
			lo := replicas(h.Spec.MinReplicas)
			if lo < 2 || h.Spec.MaxReplicas < lo {
				t.Errorf("HorizontalPodAutoscaler %s: replicas [%d, %d], want at least 2 and min <= max", h.Name, lo, h.Spec.MaxReplicas)
			}
			if w.replicas < lo || w.replicas > h.Spec.MaxReplicas {
				t.Errorf("%s: %d replicas outside its autoscaler's [%d, %d]", w, w.replicas, lo, h.Spec.MaxReplicas)
			}
			if len(h.Spec.Metrics) == 0 {
				t.Errorf("HorizontalPodAutoscaler %s has no metrics", h.Name)
			}
			// Utilization targets are relative to requests: without them the
			// autoscaler does nothing.
			for _, metric := range h.Spec.Metrics {
				if metric.Resource == nil {
					continue
				}
				for _, c := range w.template.Spec.Containers {
					if _, ok := c.Resources.Requests[metric.Resource.Name]; !ok {
						t.Errorf("%s container %s requests no %s, which its autoscaler targets", w, c.Name, metric.Resource.Name)
					}
				}
			}
		}
		for _, name := range []string{"router", "executor"} {
			if !scaled[name] {
				t.Errorf("Deployment %s has no HorizontalPodAutoscaler", name)
			}
		}
	})
}

func TestContainerResources(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		for _, w := range m.workloads {
			for _, c := range w.containers() {
				for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					req, okReq := c.Resources.Requests[r]
					lim, okLim := c.Resources.Limits[r]
					switch {
					case !okReq || !okLim:
						t.Errorf("%s container %s: %s request and limit are both required", w, c.Name, r)
					case req.Cmp(resource.Quantity{}) <= 0 || lim.Cmp(req) < 0:
						t.Errorf("%s container %s: %s request %s, limit %s; want 0 < request <= limit", w, c.Name, r, req.String(), lim.String())
					}
				}
			}
		}
	})
}

// privileged names the only container that may run privileged and as root,
// for the reasons written in deploy/k8s/base/executor.yaml.
const privileged = "Deployment/executor/executor"

// privilegedWorkload is the workload of privileged; uidLockVolume its one
// host path, where the executors of a node claim sandbox uids.
const (
	privilegedWorkload = "Deployment/executor"
	uidLockVolume      = "uids"
)

func TestSecurityContexts(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		seen := false
		for _, w := range m.workloads {
			spec := &w.template.Spec
			if spec.HostNetwork || spec.HostPID || spec.HostIPC {
				t.Errorf("%s shares a host namespace", w)
			}
			if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
				t.Errorf("%s mounts a service account token; no conch pod talks to the Kubernetes API", w)
			}
			for _, v := range spec.Volumes {
				if v.HostPath != nil && !(w.String() == privilegedWorkload && v.Name == uidLockVolume) {
					t.Errorf("%s mounts host path %s", w, v.HostPath.Path)
				}
			}
			for _, c := range w.containers() {
				sc := c.SecurityContext
				if sc == nil {
					t.Errorf("%s container %s has no securityContext", w, c.Name)
					continue
				}
				if !isTrue(sc.ReadOnlyRootFilesystem) {
					t.Errorf("%s container %s: root filesystem is writable", w, c.Name)
				}
				if w.String()+"/"+c.Name == privileged {
					seen = true
					checkExecutor(t, w, &c)
					continue
				}
				nonRoot := sc.RunAsNonRoot
				if nonRoot == nil && spec.SecurityContext != nil {
					nonRoot = spec.SecurityContext.RunAsNonRoot
				}
				uid := sc.RunAsUser
				if uid == nil && spec.SecurityContext != nil {
					uid = spec.SecurityContext.RunAsUser
				}
				if !isTrue(nonRoot) || uid == nil || *uid == 0 {
					t.Errorf("%s container %s: want runAsNonRoot and a non-zero runAsUser", w, c.Name)
				}
				if sc.Privileged != nil && *sc.Privileged {
					t.Errorf("%s container %s is privileged", w, c.Name)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("%s container %s: allowPrivilegeEscalation must be false", w, c.Name)
				}
				if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
					t.Errorf("%s container %s: capabilities %v, want drop ALL and add none", w, c.Name, sc.Capabilities)
				}
				if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
					t.Errorf("%s container %s unmasks /proc", w, c.Name)
				}
				seccomp := sc.SeccompProfile
				if seccomp == nil && spec.SecurityContext != nil {
					seccomp = spec.SecurityContext.SeccompProfile
				}
				if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("%s container %s: want the RuntimeDefault seccomp profile", w, c.Name)
				}
			}
		}
		if !seen {
			t.Errorf("no container %s: update the documented exception", privileged)
		}
	})
}

// checkExecutor holds the executor container to exactly its documented
// exception: privileged as root, and nothing more that is not needed.
func checkExecutor(t *testing.T, w *workload, c *corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if !isTrue(sc.Privileged) || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsNonRoot == nil || *sc.RunAsNonRoot {
		t.Errorf("%s container %s: want the documented privileged root container, got %+v", w, c.Name, sc)
	}
	if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
		t.Errorf("%s container %s adds capabilities %v on top of privileged", w, c.Name, sc.Capabilities.Add)
	}
	if hu := w.template.Spec.HostUsers; hu != nil && !*hu {
		t.Errorf("%s: hostUsers false leaves no room for the sandboxes' uids (see executor.yaml)", w)
	}
	// Executors of one node share the uid lock dir, a host path and
	// nothing else of the host.
	checkUIDLockDir(t, w, c)
	// Sandboxes get their root filesystem read-only from the volume the
	// init container fills.
	var rootfs string
	for _, e := range c.Env {
		if e.Name == "CONCH_SANDBOX_ROOTFS" {
			rootfs = e.Value
		}
	}
	if rootfs == "" {
		t.Errorf("%s container %s: CONCH_SANDBOX_ROOTFS is not set", w, c.Name)
		return
	}
	mounted := false
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == rootfs {
			mounted = vm.ReadOnly
		}
	}
	if !mounted {
		t.Errorf("%s container %s: %s is not a read-only volume mount", w, c.Name, rootfs)
	}
}

// checkUIDLockDir holds the executor's uid lock dir to the node's
// directory, mounted writable where the executor looks for it.
func checkUIDLockDir(t *testing.T, w *workload, c *corev1.Container) {
	t.Helper()
	var dir string
	for _, e := range c.Env {
		if e.Name == "CONCH_SANDBOX_UID_LOCK_DIR" {
			dir = e.Value
		}
	}
	var vol *corev1.Volume
	for i, v := range w.template.Spec.Volumes {
		if v.Name == uidLockVolume {
			vol = &w.template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.HostPath == nil || vol.HostPath.Path != dir || vol.HostPath.Type == nil || *vol.HostPath.Type != corev1.HostPathDirectoryOrCreate {
		t.Errorf("%s: want volume %s, the host directory CONCH_SANDBOX_UID_LOCK_DIR (%q) names", w, uidLockVolume, dir)
		return
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return vm.Name == uidLockVolume && vm.MountPath == dir && !vm.ReadOnly
	}) {
		t.Errorf("%s container %s: %s is not mounted writable at %s", w, c.Name, uidLockVolume, dir)
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

func TestProbesUseDeclaredPorts(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		for _, w := range m.workloads {
			if w.kind == "Job" {
				continue // runs to completion; nothing routes to it
			}
			for _, c := range w.template.Spec.Containers {
				if isSidecar(&c) {
					continue // serves nothing
				}
				if c.ReadinessProbe == nil || c.LivenessProbe == nil {
					t.Errorf("%s container %s: readiness and liveness probes are required", w, c.Name)
				}
				for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
					if p == nil {
						continue
					}
					port, ok := probePort(p)
					if !ok {
						t.Errorf("%s container %s: %s probe has no port", w, c.Name, kind)
						continue
					}
					if _, ok := containerPort(&c, port); !ok {
						t.Errorf("%s container %s: %s probe port %s is not a declared container port", w, c.Name, kind, port)
					}
				}
			}
		}
	})
}

// probePort is the port a probe connects to, by name or number.
func probePort(p *corev1.Probe) (string, bool) {
	switch {
	case p.GRPC != nil:
		return fmt.Sprint(p.GRPC.Port), true
	case p.HTTPGet != nil:
		return p.HTTPGet.Port.String(), true
	case p.TCPSocket != nil:
		return p.TCPSocket.Port.String(), true
	}
	return "", false
}

func TestImagesNameNoRegistry(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		for _, w := range m.workloads {
			for _, c := range w.containers() {
				first, _, more := strings.Cut(imageName(c.Image), "/")
				if more && (strings.ContainsAny(first, ".:") || first == "localhost") {
					t.Errorf("%s container %s: image %s names a registry; map registries with kustomize images:", w, c.Name, c.Image)
				}
				if !strings.Contains(strings.TrimPrefix(c.Image, imageName(c.Image)), ":") && !strings.Contains(c.Image, "@") {
					t.Errorf("%s container %s: image %s has no tag", w, c.Name, c.Image)
				}
			}
		}
	})
}

// operatorSecrets are the Secrets an operator creates for overlays that do
// not generate them, with an example value of each key that the services
// accept; deploy/k8s/README.md must document every one.
var operatorSecrets = map[string]map[string]string{
	"conch-keys": {
		"internal-secret": "an-internal-secret-of-32-bytes!!",
		"admin-key":       "an-admin-key-of-at-least-16-chars",
		"signing-keys":    "k1:a-signing-secret-of-at-least-32-bytes",
		"secrets-key":     "k1:YS1zZWNyZXRzLWtleS1vZi0zMi1ieXRlcy1vayEhISE=",
	},
	"conch-s3": {
		"access-key": "conch",
		"secret-key": "an-s3-secret-key",
	},
	"conch-s3-workspace": {
		"access-key": "workspace",
		"secret-key": "a-workspace-s3-secret",
	},
	"conch-s3-audit": {
		"access-key": "approval",
		"secret-key": "an-audit-s3-secret",
	},
	"conch-s3-responses": {
		"access-key": "router",
		"secret-key": "a-responses-s3-secret",
	},
}

func TestSecretsExistOrAreDocumented(t *testing.T) {
	readme, err := os.ReadFile(k8sDir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, keys := range operatorSecrets {
		for key := range keys {
			if !strings.Contains(string(readme), name) || !strings.Contains(string(readme), key) {
				t.Errorf("deploy/k8s/README.md does not document Secret %s key %s", name, key)
			}
		}
	}
	eachOverlay(t, func(t *testing.T, m *manifests) {
		used := 0
		for _, w := range m.workloads {
			for _, c := range w.containers() {
				for _, e := range c.Env {
					if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
						continue
					}
					used++
					ref := e.ValueFrom.SecretKeyRef
					if _, err := secretValue(m, ref.Name, ref.Key); err != nil {
						t.Errorf("%s container %s env %s: %v", w, c.Name, e.Name, err)
					}
				}
				if len(c.EnvFrom) > 0 {
					t.Errorf("%s container %s: envFrom hides which keys a container needs; name each", w, c.Name)
				}
			}
			// Secret volumes (etcd's certificates) name each key they
			// mount, so that a pod gets its own files and no others.
			for _, v := range w.template.Spec.Volumes {
				if v.Secret == nil {
					continue
				}
				if len(v.Secret.Items) == 0 {
					t.Errorf("%s volume %s mounts every key of Secret %s; list the pod's own", w, v.Name, v.Secret.SecretName)
				}
				for _, it := range v.Secret.Items {
					used++
					if _, err := secretValue(m, v.Secret.SecretName, it.Key); err != nil {
						t.Errorf("%s volume %s: %v", w, v.Name, err)
					}
				}
			}
		}
		if used == 0 {
			t.Error("no container reads a Secret")
		}
	})
}

// secretValue is the value of a key of a Secret that m renders or, where
// the overlay leaves Secrets to the operator, the documented example.
func secretValue(m *manifests, name, key string) (string, error) {
	if _, rendered := m.secrets[name]; name == etcdTLSSecret && !rendered && (!m.overlay.isChart() || m.overlay.operatorSecrets) {
		// Every kustomization leaves etcd's certificates to the operator.
		return operatorEtcdTLS(key)
	}
	if s, ok := m.secrets[name]; ok {
		if v, ok := s.Data[key]; ok {
			return string(v), nil
		}
		if v, ok := s.StringData[key]; ok {
			return v, nil
		}
		return "", fmt.Errorf("Secret %s has no key %s", name, key)
	}
	if !m.overlay.operatorSecrets {
		return "", fmt.Errorf("Secret %s is not rendered, and this overlay must render all it uses", name)
	}
	v, ok := operatorSecrets[name][key]
	if !ok {
		return "", fmt.Errorf("Secret %s key %s is neither rendered nor documented as the operator's", name, key)
	}
	return v, nil
}

func TestEveryKustomizationIsChecked(t *testing.T) {
	t.Parallel()
	checked := map[string]bool{}
	for _, o := range overlays {
		checked[o.name] = true
	}
	err := filepath.WalkDir(k8sDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		rel, err := filepath.Rel(k8sDir, filepath.Dir(p))
		if err != nil {
			return err
		}
		if !checked[filepath.ToSlash(rel)] {
			t.Errorf("deploy/k8s/%s is not in this package's overlays, so nothing checks it", filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMinIOUsers: MinIO's root password reaches MinIO's pods alone; the
// minio-auth container beside MinIO makes the users that the services
// keeping objects (minioUserVars: the workspace, the approval service's
// audit trail, the router's stored responses) hold, from the same Secrets'
// keys, each with a bucket and keys of its own, and every one reaches the
// same store (TestMinIOAuth shows what such a user can reach).
func TestMinIOUsers(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		var auth map[string]string
		for _, w := range m.workloads {
			for i := range w.template.Spec.Containers {
				c := &w.template.Spec.Containers[i]
				env := containerEnv(t, m, c)
				if _, ok := env["MINIO_ROOT_PASSWORD"]; ok && w.name != "minio" {
					t.Errorf("%s container %s holds MinIO's root password", w, c.Name)
				}
				if isSidecar(c) && c.Args[0] == "minio-auth" {
					auth = env
				}
			}
		}
		if auth == nil {
			t.Fatal("no container runs conch minio-auth beside MinIO")
		}
		ran := map[string]bool{}
		endpoints := map[string]bool{}
		for _, cc := range conchCommands(t, m) {
			prefix, ok := minioUserVars[cc.cmd]
			if !ok {
				continue
			}
			ran[cc.cmd] = true
			where := fmt.Sprintf("%s container %s", cc.w, cc.c.Name)
			for _, k := range []string{"ACCESS_KEY", "SECRET_KEY", "BUCKET"} {
				if v := cc.env[prefix+k]; v == "" || v != auth[prefix+k] {
					t.Errorf("%s: %s%s is %q, minio-auth makes %q", where, prefix, k, v, auth[prefix+k])
				}
			}
			if cc.env[prefix+"ACCESS_KEY"] == auth["MINIO_ROOT_USER"] {
				t.Errorf("%s: its access key is MinIO's root user", where)
			}
			if ep := cc.env[prefix+"ENDPOINT"]; ep == "" {
				t.Errorf("%s: no %sENDPOINT", where, prefix)
			} else {
				endpoints[ep] = true
			}
		}
		for cmd := range minioUserVars {
			if !ran[cmd] {
				t.Errorf("no container runs conch %s", cmd)
			}
		}
		if len(endpoints) != 1 {
			t.Errorf("the services reach the object store at %v, want one endpoint", slices.Sorted(maps.Keys(endpoints)))
		}
	})
}
