package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// flow is one connection the system needs: from a workload's pods to
// another's port.
type flow struct {
	from, to string // Deployment or StatefulSet names
	port     int32
}

// requiredFlows are what conch needs to work: service registration and
// discovery in etcd, the router's calls to every service, executors' calls
// to the router (tool calls), approval and workspace, and storage (the
// workspaces' files, the audit trail, stored responses).
var requiredFlows = []flow{
	{"router", "etcd", 2379}, {"approval", "etcd", 2379}, {"workspace", "etcd", 2379}, {"executor", "etcd", 2379},
	{"router", "approval", 9090}, {"router", "executor", 9090}, {"router", "workspace", 9090},
	{"executor", "router", 9090}, {"executor", "approval", 9090}, {"executor", "workspace", 9090},
	{"workspace", "minio", 9000}, {"approval", "minio", 9000}, {"router", "minio", 9000},
	{"etcd", "etcd", 2380}, {"etcd", "etcd", 2379},
	{"etcd-auth", "etcd", 2379},
}

// executorPeers are the only workloads executors may reach (besides DNS).
var executorPeers = map[string]bool{"router": true, "approval": true, "workspace": true, "etcd": true}

func TestNetworkPoliciesAllowRequiredFlows(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		byName := map[string]*workload{}
		for _, w := range m.workloads {
			byName[w.name] = w
		}
		for _, f := range requiredFlows {
			from, to := byName[f.from], byName[f.to]
			if from == nil || to == nil {
				t.Errorf("flow %v: workload missing", f)
				continue
			}
			if !m.allowed(t, networkingv1.PolicyTypeEgress, from, to, f.port) {
				t.Errorf("%s may not send to %s port %d", from, to, f.port)
			}
			if !m.allowed(t, networkingv1.PolicyTypeIngress, to, from, f.port) {
				t.Errorf("%s does not accept %s on port %d", to, from, f.port)
			}
		}
	})
}

func TestNetworkPoliciesIsolate(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		for _, w := range m.workloads {
			for _, dir := range []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress} {
				if len(m.policiesFor(t, w, dir)) == 0 {
					t.Errorf("%s: no NetworkPolicy restricts its %s", w, dir)
				}
			}
		}
		for _, p := range m.policies {
			selected := m.selected(t, &p.Spec.PodSelector)
			if len(selected) == 0 {
				t.Errorf("NetworkPolicy %s selects no workload", p.Name)
			}
			for _, rule := range p.Spec.Ingress {
				open := len(rule.From) == 0
				for _, peer := range rule.From {
					open = open || peer.IPBlock != nil || peer.NamespaceSelector != nil
					m.checkPeer(t, p, peer)
				}
				for _, w := range selected {
					for _, port := range rule.Ports {
						if port.Port == nil {
							t.Errorf("NetworkPolicy %s: an ingress rule without ports opens every port", p.Name)
							continue
						}
						if _, ok := podPort(&w.template.Spec, port.Port.String()); !ok {
							t.Errorf("NetworkPolicy %s: ingress port %s is not a port of %s", p.Name, port.Port, w)
						}
					}
					// Only the router's public port is reachable from outside
					// the namespace.
					if open && (w.name != "router" || len(rule.Ports) != 1 || rule.Ports[0].Port.String() != "8080") {
						t.Errorf("NetworkPolicy %s opens %s ports %s to peers outside the namespace", p.Name, w, portList(rule.Ports))
					}
				}
			}
			for _, rule := range p.Spec.Egress {
				for _, peer := range rule.To {
					m.checkPeer(t, p, peer)
				}
			}
		}
	})
}

func TestExecutorsReachOnlyTheirPeers(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		executor := m.workload("Deployment", "executor")
		if executor == nil {
			t.Fatal("no executor Deployment")
		}
		policies := m.policiesFor(t, executor, networkingv1.PolicyTypeEgress)
		if len(policies) == 0 {
			t.Fatal("executor egress is not restricted")
		}
		for _, p := range policies {
			for _, rule := range p.Spec.Egress {
				if isDNS(rule) {
					continue
				}
				if len(rule.To) == 0 {
					t.Errorf("NetworkPolicy %s lets executors reach any address on ports %s", p.Name, portList(rule.Ports))
				}
				for _, peer := range rule.To {
					if peer.IPBlock != nil {
						// Sandbox egress: public addresses only.
						if why := publicOnly(peer.IPBlock); why != "" {
							t.Errorf("NetworkPolicy %s lets executors reach %s: %s", p.Name, peer.IPBlock.CIDR, why)
						}
						continue
					}
					if peer.NamespaceSelector != nil || peer.PodSelector == nil {
						t.Errorf("NetworkPolicy %s lets executors leave the namespace: %+v", p.Name, peer)
						continue
					}
					for _, w := range m.selected(t, peer.PodSelector) {
						if !executorPeers[w.name] {
							t.Errorf("NetworkPolicy %s lets executors reach %s", p.Name, w)
						}
					}
				}
			}
		}
		if minio := m.workload("StatefulSet", "minio"); minio != nil && m.allowed(t, networkingv1.PolicyTypeEgress, executor, minio, 9000) {
			t.Error("executors may reach MinIO; their files go through the workspace service")
		}
	})
}

// nonPublic are the ranges no egress of a sandbox may reach: private,
// carrier-grade NAT, link-local (the cloud metadata service), loopback.
var nonPublic = map[bool][]string{
	false: {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"},
	true:  {"fc00::/7", "fe80::/10", "::1/128"},
}

// publicOnly says what non-public range b does not except, or "".
func publicOnly(b *networkingv1.IPBlock) string {
	v6 := strings.Contains(b.CIDR, ":")
	for _, r := range nonPublic[v6] {
		if !slices.Contains(b.Except, r) {
			return r + " is not excepted"
		}
	}
	return ""
}

// Only executors reach the internet on a sandbox's behalf: no other
// workload has an IP block to public addresses.
func TestOnlyExecutorsHaveSandboxEgress(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		found := false
		for _, p := range m.policies {
			for _, rule := range p.Spec.Egress {
				for _, peer := range rule.To {
					if peer.IPBlock == nil {
						continue
					}
					for _, w := range m.selected(t, &p.Spec.PodSelector) {
						if w.name != "executor" {
							t.Errorf("NetworkPolicy %s gives %s an IP block %s", p.Name, w, peer.IPBlock.CIDR)
						}
						found = true
					}
				}
			}
		}
		if !found {
			t.Error("executors cannot reach the internet for sandbox egress")
		}
	})
}

// isDNS tells a rule that allows only name lookups in the cluster DNS.
func isDNS(rule networkingv1.NetworkPolicyEgressRule) bool {
	if len(rule.To) == 0 || len(rule.Ports) == 0 {
		return false
	}
	for _, peer := range rule.To {
		if peer.NamespaceSelector == nil || peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "kube-system" ||
			peer.PodSelector == nil || peer.PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
			return false
		}
	}
	for _, p := range rule.Ports {
		if p.Port == nil || p.Port.IntValue() != 53 {
			return false
		}
	}
	return true
}

// checkPeer reports a pod selector, within the namespace, that selects
// nothing: a typo in a label silently cuts a flow.
func (m *manifests) checkPeer(t *testing.T, p *networkingv1.NetworkPolicy, peer networkingv1.NetworkPolicyPeer) {
	t.Helper()
	if peer.PodSelector != nil && peer.NamespaceSelector == nil && len(m.selected(t, peer.PodSelector)) == 0 {
		t.Errorf("NetworkPolicy %s: peer %v selects no workload", p.Name, peer.PodSelector.MatchLabels)
	}
}

// policiesFor returns the policies that select w's pods for dir.
func (m *manifests) policiesFor(t *testing.T, w *workload, dir networkingv1.PolicyType) []*networkingv1.NetworkPolicy {
	t.Helper()
	var out []*networkingv1.NetworkPolicy
	for _, p := range m.policies {
		s, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: %v", p.Name, err)
		}
		if !s.Matches(labels.Set(w.template.Labels)) {
			continue
		}
		for _, pt := range p.Spec.PolicyTypes {
			if pt == dir {
				out = append(out, p)
			}
		}
	}
	return out
}

// allowed reports whether w's policies for dir let it talk to peer on port
// (a port of the receiving side). Unrestricted directions are allowed.
func (m *manifests) allowed(t *testing.T, dir networkingv1.PolicyType, w, peer *workload, port int32) bool {
	t.Helper()
	policies := m.policiesFor(t, w, dir)
	if len(policies) == 0 {
		return true
	}
	receiver := peer
	if dir == networkingv1.PolicyTypeIngress {
		receiver = w
	}
	for _, p := range policies {
		type rule struct {
			peers []networkingv1.NetworkPolicyPeer
			ports []networkingv1.NetworkPolicyPort
		}
		var rules []rule
		if dir == networkingv1.PolicyTypeIngress {
			for _, r := range p.Spec.Ingress {
				rules = append(rules, rule{r.From, r.Ports})
			}
		} else {
			for _, r := range p.Spec.Egress {
				rules = append(rules, rule{r.To, r.Ports})
			}
		}
		for _, r := range rules {
			if peerMatches(t, r.peers, peer) && portMatches(r.ports, receiver, port) {
				return true
			}
		}
	}
	return false
}

// peerMatches: an empty list is everyone; a pod selector alone selects pods
// of this namespace.
func peerMatches(t *testing.T, peers []networkingv1.NetworkPolicyPeer, w *workload) bool {
	t.Helper()
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.PodSelector == nil || p.NamespaceSelector != nil || p.IPBlock != nil {
			continue
		}
		s, err := metav1.LabelSelectorAsSelector(p.PodSelector)
		if err != nil {
			t.Fatalf("peer selector: %v", err)
		}
		if s.Matches(labels.Set(w.template.Labels)) {
			return true
		}
	}
	return false
}

// portMatches: an empty list is every port; named ports are looked up on
// the receiving pods.
func portMatches(ports []networkingv1.NetworkPolicyPort, receiver *workload, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if p.Port == nil {
			return true
		}
		want := p.Port.String()
		if cp, ok := podPort(&receiver.template.Spec, want); ok && p.Port.IntValue() == 0 {
			want = fmt.Sprint(cp.ContainerPort)
		}
		if want == fmt.Sprint(port) {
			return true
		}
	}
	return false
}

// portList formats policy ports for messages.
func portList(ports []networkingv1.NetworkPolicyPort) string {
	if len(ports) == 0 {
		return "(all)"
	}
	var out []string
	for _, p := range ports {
		if p.Port == nil {
			out = append(out, "(all)")
			continue
		}
		out = append(out, p.Port.String())
	}
	return strings.Join(out, ",")
}
