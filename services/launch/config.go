package launch

import (
	"crypto/tls"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/conch-sh/conch/services/approval"
	"github.com/conch-sh/conch/services/executor"
	"github.com/conch-sh/conch/services/internal/ceiling"
	"github.com/conch-sh/conch/services/internal/outbound"
	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/logging"
	"github.com/conch-sh/conch/services/internal/platform/pki"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/router"
	"github.com/conch-sh/conch/services/workspace"
)

// Common is the configuration every single-service command shares. Each
// command's configuration below is Common and the service's own Config,
// which lives beside the service (router.Config, executor.Config,
// approval.Config, workspace.Config).
type Common struct {
	EtcdClientConfig
	GRPCAddr        string        `flag:"grpc-addr" env:"CONCH_GRPC_ADDR" default:"127.0.0.1:0" usage:"gRPC listen address"`
	AdvertiseAddr   string        `flag:"advertise-addr" env:"CONCH_ADVERTISE_ADDR" usage:"address registered in etcd for other services to dial (default: the listen address)"`
	InternalSecret  string        `env:"CONCH_INTERNAL_SECRET" usage:"secret shared by the cluster's services to sign call scopes (at least 16 bytes)"`
	MetricsAddr     string        `flag:"metrics-addr" env:"CONCH_METRICS_ADDR" usage:"address serving /metrics (empty: none; the router serves it on --http-addr)"`
	LogLevel        string        `flag:"log-level" env:"CONCH_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
	OTLPEndpoint    string        `flag:"otlp-endpoint" env:"OTEL_EXPORTER_OTLP_ENDPOINT" usage:"OTLP gRPC endpoint for traces (empty: no export)"`
	ShutdownTimeout time.Duration `flag:"shutdown-timeout" env:"CONCH_SHUTDOWN_TIMEOUT" default:"10s" usage:"hard deadline for draining on shutdown"`
	DrainDelay      time.Duration `flag:"drain-delay" env:"CONCH_DRAIN_DELAY" default:"0s" usage:"time to keep serving after leaving discovery and reporting NOT_SERVING"`
	// The router and the approval service connect out for tenants
	// through the guard these settings shape.
	outbound.Config
	// Ceilings bound what tenants set; the router refuses on save what
	// the executor would refuse on use.
	Ceilings ceiling.Config
	// Quotas are the default quotas of every account; an admin may give
	// an account its own.
	Quotas quotas.Config
}

// EtcdClientConfig says how a conch process reaches etcd: every service,
// and `conch secrets rotate`.
type EtcdClientConfig struct {
	EtcdEndpoints []string `flag:"etcd-endpoints" env:"CONCH_ETCD_ENDPOINTS" default:"127.0.0.1:2379" usage:"etcd endpoints, comma separated"`
	// etcd accepts only clients holding a certificate its CA signed
	// (mTLS); with its auth on, the certificate's common name is the
	// service's etcd user, whose role limits it to its key prefixes.
	EtcdCAFile   string `flag:"etcd-ca-file" env:"CONCH_ETCD_CA_FILE" usage:"CA certificate etcd's server certificate is verified with (set: etcd is reached over TLS)"`
	EtcdCertFile string `flag:"etcd-cert-file" env:"CONCH_ETCD_CERT_FILE" usage:"client certificate this service authenticates to etcd with"`
	EtcdKeyFile  string `flag:"etcd-key-file" env:"CONCH_ETCD_KEY_FILE" usage:"key of --etcd-cert-file"`
	// EtcdRequestTimeout bounds each call to etcd, so that a cluster
	// that lost its quorum fails requests instead of holding them.
	EtcdRequestTimeout time.Duration `flag:"etcd-request-timeout" env:"CONCH_ETCD_REQUEST_TIMEOUT" default:"5s" usage:"how long one etcd call may wait for an answer (longer than a leader election)"`
}

// Validate checks the etcd settings.
func (c *EtcdClientConfig) Validate() error {
	if len(c.EtcdEndpoints) == 0 {
		return config.Invalid("--etcd-endpoints", "at least one endpoint is required")
	}
	if (c.EtcdCertFile == "") != (c.EtcdKeyFile == "") {
		return config.Invalid("--etcd-cert-file", "--etcd-cert-file and --etcd-key-file go together")
	}
	if c.EtcdCertFile != "" && c.EtcdCAFile == "" {
		return config.Invalid("--etcd-ca-file", "required with --etcd-cert-file")
	}
	if c.EtcdRequestTimeout <= 0 {
		return config.Invalid("--etcd-request-timeout", "must be positive")
	}
	return nil
}

// Validate checks the shared settings.
func (c *Common) Validate() error {
	if err := c.EtcdClientConfig.Validate(); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		return config.Invalid("--grpc-addr", "%v", err)
	}
	if len(c.InternalSecret) < 16 {
		return config.Invalid("CONCH_INTERNAL_SECRET", "must be set to at least 16 bytes")
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return config.Invalid("--log-level", "%v", err)
	}
	if c.ShutdownTimeout <= 0 {
		return config.Invalid("--shutdown-timeout", "must be positive")
	}
	if err := c.Ceilings.Validate(); err != nil {
		return err
	}
	if err := c.Quotas.Validate(); err != nil {
		return err
	}
	return c.Config.Validate()
}

// etcdTLS is the TLS configuration of the process's etcd client, nil when
// etcd is reached without TLS.
func (c *EtcdClientConfig) etcdTLS() (*tls.Config, error) {
	if c.EtcdCAFile == "" {
		return nil, nil
	}
	return pki.ClientConfig(c.EtcdCAFile, pki.Pair{CertFile: c.EtcdCertFile, KeyFile: c.EtcdKeyFile})
}

// controlPlane are the host:port endpoints no tenant's outbound
// connection may reach, whatever the operator allows: etcd's, and the
// object stores' named in extra.
func (c *Common) controlPlane(extra ...string) []string {
	return hostPorts(append(slices.Clone(c.EtcdEndpoints), extra...)...)
}

// hostPorts are endpoints (host:port or URLs) as host:port; empty ones
// are left out.
func hostPorts(endpoints ...string) []string {
	var out []string
	for _, e := range endpoints {
		if e == "" {
			continue
		}
		if u, err := url.Parse(e); err == nil && u.Host != "" {
			e = u.Host
		}
		out = append(out, e)
	}
	return out
}

// RouterConfig is the configuration of `conch router`.
type RouterConfig struct {
	Common
	router.Config
	EtcdAdminConfig
}

// Validate checks the router's settings.
func (c *RouterConfig) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if err := c.EtcdAdminConfig.Validate(&c.EtcdClientConfig); err != nil {
		return err
	}
	return c.Config.Validate()
}

// EtcdAdminConfig is the etcd user the router elected among its replicas
// maintains etcd's space with (see etcdx.SpaceWatcher): compacting,
// defragmenting and disarming NOSPACE take etcd's root role, which a
// service's own user, limited to its key prefixes, does not hold. Unset,
// the router uses its own user: enough where etcd's auth is off; where it
// is on, the router then only reports etcd's space, and says so.
type EtcdAdminConfig struct {
	EtcdAdminCertFile string `flag:"etcd-admin-cert-file" env:"CONCH_ETCD_ADMIN_CERT_FILE" usage:"client certificate of etcd's root user, to compact and defragment etcd and disarm its NOSPACE alarm (default: --etcd-cert-file; without root the router only reports etcd's space)"`
	EtcdAdminKeyFile  string `flag:"etcd-admin-key-file" env:"CONCH_ETCD_ADMIN_KEY_FILE" usage:"key of --etcd-admin-cert-file"`
}

// Validate checks the admin's certificate, which goes with etcd's CA.
func (c *EtcdAdminConfig) Validate(etcd *EtcdClientConfig) error {
	if (c.EtcdAdminCertFile == "") != (c.EtcdAdminKeyFile == "") {
		return config.Invalid("--etcd-admin-cert-file", "--etcd-admin-cert-file and --etcd-admin-key-file go together")
	}
	if c.EtcdAdminCertFile != "" && etcd.EtcdCAFile == "" {
		return config.Invalid("--etcd-ca-file", "required with --etcd-admin-cert-file")
	}
	return nil
}

// ExecutorConfig is the configuration of `conch executor`.
type ExecutorConfig struct {
	Common
	executor.Config
}

// Validate checks the executor's settings.
func (c *ExecutorConfig) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	return c.Config.Validate()
}

// ApprovalConfig is the configuration of `conch approval`.
type ApprovalConfig struct {
	Common
	approval.Config
}

// Validate checks the approval service's settings.
func (c *ApprovalConfig) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	return c.Config.Validate()
}

// WorkspaceConfig is the configuration of `conch workspace`.
type WorkspaceConfig struct {
	Common
	workspace.Config
}

// Validate checks the workspace service's settings.
func (c *WorkspaceConfig) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	return c.Config.Validate()
}
