package deploy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/launch"
)

// etcdTLSUsers are the etcd users whose certificates the deployments hand
// out, by the conch command that authenticates as each: the services as
// themselves, etcd-auth as root.
var etcdTLSUsers = map[string]string{
	"router": "router", "executor": "executor", "approval": "approval", "workspace": "workspace",
	"etcd-auth": "root",
}

// etcdCert checks a certificate and key as etcd would take them: the key
// is the certificate's, the CA signed it, and it is user's (its common
// name) or, with hosts, a member's valid for each of them.
func etcdCert(caPEM, certPEM, keyPEM []byte, user string, hosts ...string) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("certificate and key: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	blk, _ := pem.Decode(caPEM)
	if blk == nil {
		return fmt.Errorf("CA is not PEM")
	}
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	if err := cert.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("not signed by the CA: %w", err)
	}
	if len(hosts) == 0 && cert.Subject.CommonName != user {
		return fmt.Errorf("certificate of etcd user %q, want %q", cert.Subject.CommonName, user)
	}
	for _, h := range hosts {
		if err := cert.VerifyHostname(h); err != nil {
			return fmt.Errorf("member certificate: %w", err)
		}
	}
	return nil
}

// etcdUsersSeen checks that every user of etcdTLSUsers got its
// certificate somewhere.
func etcdUsersSeen(seen map[string]bool) error {
	want := slices.Sorted(maps.Keys(etcdTLSUsers))
	got := slices.Sorted(maps.Keys(seen))
	if !slices.Equal(want, got) {
		return fmt.Errorf("commands with their etcd certificate: %v, want %v", got, want)
	}
	return nil
}

// etcdTLSSecret is the Secret of etcd's CA and certificates: the chart's,
// or the operator's, made with `conch etcd-pki` as deploy/k8s/README.md
// says.
const etcdTLSSecret = "conch-etcd-tls"

// etcdPKIHosts are the member names deploy/k8s/README.md gives
// `conch etcd-pki`: what the services dial and what the members
// advertise.
var etcdPKIHosts = []string{
	"etcd-0.etcd", "etcd-1.etcd", "etcd-2.etcd",
	"etcd-0.etcd.conch.svc", "etcd-1.etcd.conch.svc", "etcd-2.etcd.conch.svc",
}

// operatorPKI is the directory `conch etcd-pki` filled as the README says,
// shared by the package's tests; TestMain removes it, CA key and all.
var operatorPKI = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "conch-deploy-pki-")
	if err != nil {
		return "", err
	}
	operatorPKIDir = dir
	return dir, launch.RunEtcdPKI(launch.EtcdPKIConfig{Dir: dir, Hosts: etcdPKIHosts}, io.Discard)
})

// operatorPKIDir is operatorPKI's directory once made.
var operatorPKIDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if operatorPKIDir != "" {
		_ = os.RemoveAll(operatorPKIDir)
	}
	os.Exit(code)
}

// operatorEtcdTLS is a key of the operator's Secret conch-etcd-tls: a
// file `conch etcd-pki` makes. The CA's key is never one.
func operatorEtcdTLS(key string) (string, error) {
	dir, err := operatorPKI()
	if err != nil {
		return "", err
	}
	if key == "ca-key.pem" || strings.ContainsRune(key, '/') {
		return "", fmt.Errorf("Secret %s holds no key %s", etcdTLSSecret, key)
	}
	b, err := os.ReadFile(filepath.Join(dir, key))
	if err != nil {
		return "", fmt.Errorf("Secret %s key %s is no file conch etcd-pki makes", etcdTLSSecret, key)
	}
	return string(b), nil
}

// TestK8sReadmeMakesTheEtcdSecret: deploy/k8s/README.md makes the Secret
// with the hosts the checks here use, and leaves the CA's key out.
func TestK8sReadmeMakesTheEtcdSecret(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(k8sDir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := "conch etcd-pki --dir etcd-pki --hosts " + strings.Join(etcdPKIHosts, ",")
	if !strings.Contains(string(b), want) {
		t.Errorf("deploy/k8s/README.md does not say %q", want)
	}
	if !strings.Contains(string(b), "kubectl -n conch create secret generic "+etcdTLSSecret) {
		t.Errorf("deploy/k8s/README.md does not create Secret %s", etcdTLSSecret)
	}
}

// mountedFile is the content a container finds at path: a key of a
// Secret volume mounted read-only.
func mountedFile(m *manifests, w *workload, c *corev1.Container, path string) ([]byte, error) {
	for _, vm := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !ok {
			continue
		}
		if !vm.ReadOnly {
			return nil, fmt.Errorf("%s is mounted writable", vm.MountPath)
		}
		for _, v := range w.template.Spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					s, err := secretValue(m, v.Secret.SecretName, it.Key)
					return []byte(s), err
				}
			}
		}
		return nil, fmt.Errorf("%s is no key of a Secret volume at %s", path, vm.MountPath)
	}
	return nil, fmt.Errorf("%s is on no volume", path)
}

// TestEtcdTLS: the members serve clients and peers over https alone,
// asking each for a certificate of the CA, with a member certificate
// valid for the names they are reached at; every conch command reaches
// etcd over https with its own certificate, from a Secret volume that
// holds its files alone; the etcd-auth Job runs as root (in the chart,
// after every install and upgrade).
func TestEtcdTLS(t *testing.T) {
	eachOverlay(t, func(t *testing.T, m *manifests) {
		etcd := m.workload("StatefulSet", "etcd")
		if etcd == nil {
			t.Fatal("no etcd StatefulSet")
		}
		for i := range etcd.template.Spec.Containers {
			c := &etcd.template.Spec.Containers[i]
			if c.Name != "etcd" {
				continue
			}
			args := map[string]string{}
			for _, a := range c.Args {
				k, v, _ := strings.Cut(a, "=")
				args[k] = v
			}
			for _, f := range []string{"--listen-client-urls", "--advertise-client-urls", "--listen-peer-urls", "--initial-advertise-peer-urls", "--initial-cluster"} {
				if v := args[f]; v == "" || strings.Contains(v, "http://") || !strings.Contains(v, "https://") {
					t.Errorf("etcd %s=%q, want https URLs only", f, v)
				}
			}
			// The one plain listener serves metrics and health, no key.
			for k, v := range args {
				if strings.Contains(v, "http://") && k != "--listen-metrics-urls" {
					t.Errorf("etcd %s=%s listens plain http", k, v)
				}
			}
			for _, f := range []string{"--client-cert-auth", "--peer-client-cert-auth"} {
				if _, ok := args[f]; !ok {
					t.Errorf("etcd lacks %s", f)
				}
			}
			var hosts []string
			for i := range etcd.replicas {
				host := fmt.Sprintf("%s-%d.%s", etcd.name, i, etcd.serviceName)
				hosts = append(hosts, host, host+"."+namespace+".svc")
			}
			for _, prefix := range []string{"--", "--peer-"} {
				var files [3][]byte
				for j, f := range []string{"trusted-ca-file", "cert-file", "key-file"} {
					b, err := mountedFile(m, etcd, c, args[prefix+f])
					if err != nil {
						t.Errorf("etcd %s%s: %v", prefix, f, err)
					}
					files[j] = b
				}
				if err := etcdCert(files[0], files[1], files[2], "", hosts...); err != nil {
					t.Errorf("etcd %scert-file: %v", prefix, err)
				}
			}
		}
		seen := map[string]bool{}
		for _, cc := range conchCommands(t, m) {
			if sidecars[cc.cmd] {
				continue // uses no etcd
			}
			user, ok := etcdTLSUsers[cc.cmd]
			if !ok {
				t.Errorf("%s runs conch %s, which has no etcd user", cc.w, cc.cmd)
				continue
			}
			seen[cc.cmd] = true
			if cc.cmd == "etcd-auth" {
				if cc.w.kind != "Job" {
					t.Errorf("%s runs etcd-auth; want a Job", cc.w)
				}
				if m.overlay.isChart() && cc.w.annotations["helm.sh/hook"] != "post-install,post-upgrade" {
					t.Errorf("%s is not a post-install,post-upgrade hook: %v", cc.w, cc.w.annotations)
				}
				lookup := func(k string) (string, bool) { v, ok := cc.env[k]; return v, ok }
				fs := flag.NewFlagSet("conch etcd-auth", flag.ContinueOnError)
				fs.SetOutput(io.Discard)
				if err := config.LoadWith(fs, cc.args, &launch.EtcdAuthConfig{}, lookup); err != nil {
					t.Errorf("%s: conch etcd-auth rejects its configuration: %v", cc.w, err)
				}
			}
			var files [3][]byte
			for j, f := range []string{"etcd-ca-file", "etcd-cert-file", "etcd-key-file"} {
				b, err := mountedFile(m, cc.w, cc.c, cc.flags[f])
				if err != nil {
					t.Errorf("%s --%s: %v", cc.w, f, err)
				}
				files[j] = b
			}
			if err := etcdCert(files[0], files[1], files[2], user); err != nil {
				t.Errorf("%s: %v", cc.w, err)
			}
			// No other user's key in the pod.
			for _, v := range cc.w.template.Spec.Volumes {
				if v.Secret == nil || v.Secret.SecretName != m.etcdSecretName(cc.w) {
					continue
				}
				for _, it := range v.Secret.Items {
					if it.Key != "ca.pem" && it.Key != user+".pem" && it.Key != user+"-key.pem" {
						t.Errorf("%s mounts %s of etcd's Secret, not its own", cc.w, it.Key)
					}
				}
			}
		}
		if err := etcdUsersSeen(seen); err != nil {
			t.Error(err)
		}
	})
}

// etcdSecretName is the Secret w's etcd certificate comes from.
func (m *manifests) etcdSecretName(w *workload) string {
	for _, v := range w.template.Spec.Volumes {
		if v.Secret != nil && slices.ContainsFunc(v.Secret.Items, func(it corev1.KeyToPath) bool { return it.Key == "ca.pem" }) {
			return v.Secret.SecretName
		}
	}
	return ""
}
