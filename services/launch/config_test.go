package launch

import (
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/config/configtest"
)

// TestConfigErrorsNameTheField checks that every rejected setting names the
// flag or variable that holds it.
func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	const secret = "CONCH_INTERNAL_SECRET=0123456789abcdef"
	const keys = "CONCH_SECRETS_KEY=k1:YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE="
	const responses = "CONCH_RESPONSES_DIR=/var/lib/conch/responses"
	tests := []struct {
		name      string
		newConfig func() any
		args      []string
		env       []string
		wantField string // "" means valid
	}{
		{"dev defaults", devConfig, nil, nil, ""},
		{"dev bad http addr", devConfig, []string{"--http-addr", "8080"}, nil, "--http-addr"},
		{"dev bad http addr from env", devConfig, nil, []string{"CONCH_HTTP_ADDR=nope"}, "--http-addr"},
		{"dev flag wins over env", devConfig, []string{"--http-addr", "127.0.0.1:1"}, []string{"CONCH_HTTP_ADDR=nope"}, ""},
		{"dev empty data dir", devConfig, []string{"--data-dir", " "}, nil, "--data-dir"},
		{"dev short api key", devConfig, nil, []string{"CONCH_API_KEY=short"}, "CONCH_API_KEY"},
		{"dev s3 without keys", devConfig, nil, []string{"CONCH_S3_ENDPOINT=http://127.0.0.1:9000"}, "CONCH_S3_ACCESS_KEY"},
		{"dev bad log level", devConfig, []string{"--log-level", "loud"}, nil, "--log-level"},
		{"dev relative uid lock dir", devConfig, []string{"--sandbox-uid-lock-dir", "uids"}, nil, "--sandbox-uid-lock-dir"},
		{"dev bad public url", devConfig, []string{"--public-url", "conch.example"}, nil, "--public-url"},
		{"dev secrets key", devConfig, nil, []string{keys}, ""},
		{"dev bad secrets key", devConfig, nil, []string{"CONCH_SECRETS_KEY=k1:short"}, "CONCH_SECRETS_KEY"},
		{"router valid", routerConfig, nil, []string{secret, keys, responses}, ""},
		{"router missing secret", routerConfig, nil, []string{keys}, "CONCH_INTERNAL_SECRET"},
		{"router missing secrets key", routerConfig, nil, []string{secret}, "CONCH_SECRETS_KEY"},
		{"router bad grpc addr", routerConfig, []string{"--grpc-addr", "x"}, []string{secret, keys, responses}, "--grpc-addr"},
		{"router empty etcd", routerConfig, []string{"--etcd-endpoints", ""}, []string{secret, keys, responses}, "--etcd-endpoints"},
		{"router bad shutdown timeout", routerConfig, []string{"--shutdown-timeout", "soon"}, []string{secret, keys, responses}, "--shutdown-timeout"},
		{"router zero shutdown timeout", routerConfig, []string{"--shutdown-timeout", "0s"}, []string{secret, keys, responses}, "--shutdown-timeout"},
		{"router zero etcd request timeout", routerConfig, []string{"--etcd-request-timeout", "0s"}, []string{secret, keys, responses}, "--etcd-request-timeout"},
		{"router etcd admin", routerConfig, []string{"--etcd-ca-file", "ca.pem", "--etcd-admin-cert-file", "root.pem", "--etcd-admin-key-file", "root-key.pem"}, []string{secret, keys, responses}, ""},
		{"router etcd admin without key", routerConfig, []string{"--etcd-ca-file", "ca.pem", "--etcd-admin-cert-file", "root.pem"}, []string{secret, keys, responses}, "--etcd-admin-cert-file"},
		{"router etcd admin without CA", routerConfig, []string{"--etcd-admin-cert-file", "root.pem", "--etcd-admin-key-file", "root-key.pem"}, []string{secret, keys, responses}, "--etcd-ca-file"},
		{"dev negative etcd quota", devConfig, []string{"--etcd-quota-bytes", "-1"}, nil, "--etcd-quota-bytes"},
		{"service valid", serviceConfig, []string{"--etcd-endpoints", "a:2379,b:2379"}, []string{secret, keys}, ""},
		{"service missing secret", serviceConfig, nil, []string{keys}, "CONCH_INTERNAL_SECRET"},
		{"service missing secrets key", serviceConfig, nil, []string{secret}, "CONCH_SECRETS_KEY"},
		{"service unknown flag", serviceConfig, []string{"--http-addr", "x:1"}, []string{secret, keys}, "http-addr"},
		{"executor needs no secrets key", executorConfig, nil, []string{secret}, ""},
		{"secrets rotate valid", rotateConfig, []string{"--etcd-endpoints", "a:2379"}, []string{keys}, ""},
		{"secrets rotate without keys", rotateConfig, nil, nil, "CONCH_SECRETS_KEY"},
		{"secrets rotate empty etcd", rotateConfig, []string{"--etcd-endpoints", ""}, []string{keys}, "--etcd-endpoints"},
		{"dev bad signing keys", devConfig, nil, []string{"CONCH_SIGNING_KEYS=k1:short"}, "CONCH_SIGNING_KEYS"},
		{"workspace valid on disk", workspaceConfig, []string{"--dir", "/tmp/ws"}, []string{secret, signingKeys}, ""},
		{"workspace without storage", workspaceConfig, nil, []string{secret, signingKeys}, "CONCH_S3_ENDPOINT"},
		{"etcd valid", etcdConfig, etcdArgs(), nil, ""},
		{"etcd without name", etcdConfig, etcdArgs("--name", ""), nil, "--name"},
		{"etcd without data dir", etcdConfig, etcdArgs("--data-dir", ""), nil, "--data-dir"},
		{"etcd bad client URL", etcdConfig, etcdArgs("--listen-client", "127.0.0.1:2379"), nil, "--listen-client"},
		{"etcd bad peer URL", etcdConfig, etcdArgs("--listen-peer", "http://127.0.0.1"), nil, "--listen-peer"},
		{"etcd member missing from the cluster", etcdConfig, etcdArgs("--name", "e9"), nil, "--initial-cluster"},
		{"etcd peer URL not the member's", etcdConfig, etcdArgs("--listen-peer", "http://127.0.0.1:2480"), nil, "--initial-cluster"},
		{"etcd-pki valid", etcdPKIConfig, []string{"--dir", "pki", "--hosts", "etcd-0,etcd-1"}, nil, ""},
		{"etcd-pki from env", etcdPKIConfig, nil, []string{"CONCH_ETCD_PKI_DIR=pki", "CONCH_ETCD_PKI_HOSTS=etcd-0"}, ""},
		{"etcd-pki without dir", etcdPKIConfig, []string{"--hosts", "etcd-0"}, nil, "--dir"},
		{"etcd-pki without hosts", etcdPKIConfig, []string{"--dir", "pki"}, nil, "--hosts"},
		{"etcd-auth valid", etcdAuthConfig, etcdAuthArgs(), nil, ""},
		{"etcd-auth without a certificate", etcdAuthConfig, []string{"--etcd-ca-file", "ca.pem"}, nil, "--etcd-cert-file"},
		{"etcd-auth certificate without CA", etcdAuthConfig, []string{"--etcd-cert-file", "root.pem", "--etcd-key-file", "root-key.pem"}, nil, "--etcd-ca-file"},
		{"etcd-auth certificate without key", etcdAuthConfig, []string{"--etcd-ca-file", "ca.pem", "--etcd-cert-file", "root.pem"}, nil, "--etcd-cert-file"},
		{"etcd-auth zero wait", etcdAuthConfig, append(etcdAuthArgs(), "--wait", "0s"), nil, "--wait"},
		{"etcd-auth bad log level", etcdAuthConfig, append(etcdAuthArgs(), "--log-level", "loud"), nil, "--log-level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := configtest.Load(tt.newConfig(), tt.args, tt.env)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("error = %v, want one naming %s", err, tt.wantField)
			}
		})
	}
}

func devConfig() any      { return &DevConfig{} }
func routerConfig() any   { return &RouterConfig{} }
func serviceConfig() any  { return &ApprovalConfig{} }
func executorConfig() any { return &ExecutorConfig{} }
func rotateConfig() any   { return &SecretsRotateConfig{} }

func workspaceConfig() any { return &WorkspaceConfig{} }
func etcdConfig() any      { return &EtcdConfig{} }
func etcdPKIConfig() any   { return &EtcdPKIConfig{} }
func etcdAuthConfig() any  { return &EtcdAuthConfig{} }

// etcdAuthArgs are the flags of a valid `conch etcd-auth`.
func etcdAuthArgs() []string {
	return []string{"--etcd-endpoints", "https://etcd-0:2379", "--etcd-ca-file", "ca.pem", "--etcd-cert-file", "root.pem", "--etcd-key-file", "root-key.pem"}
}

// etcdArgs are the flags of a valid member e0, with overrides appended
// (the last of a repeated flag wins).
func etcdArgs(override ...string) []string {
	return append([]string{"--name", "e0", "--data-dir", "/tmp/e0",
		"--listen-client", "http://127.0.0.1:2379", "--listen-peer", "http://127.0.0.1:2380",
		"--initial-cluster", "e0=http://127.0.0.1:2380,e1=http://127.0.0.1:2381,e2=http://127.0.0.1:2382"}, override...)
}

const signingKeys = "CONCH_SIGNING_KEYS=k1:0123456789abcdef0123456789abcdef"
