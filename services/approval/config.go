package approval

import (
	"time"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/seal"
)

// Config is the approval service's own configuration: the settings of
// `conch approval` beyond those every service shares. The approval
// service keeps the audit trail (executors forward their records to it).
type Config struct {
	AuditConfig
	// KeyConfig holds the keys that seal the forwarding configs' chat
	// tokens in etcd.
	seal.KeyConfig
}

// Validate checks the approval service's settings.
func (c *Config) Validate() error {
	if err := c.AuditConfig.Validate(); err != nil {
		return err
	}
	return c.KeyConfig.Validate()
}

// AuditConfig says where the audit trail is kept and how it is written, in
// `conch approval` and `conch dev`.
type AuditConfig struct {
	AuditDir         string        `flag:"audit-dir" env:"CONCH_AUDIT_DIR" usage:"local directory for the audit trail when CONCH_AUDIT_S3_ENDPOINT is not set (empty with no endpoint: no audit trail)"`
	AuditS3Endpoint  string        `env:"CONCH_AUDIT_S3_ENDPOINT" usage:"S3 endpoint for the audit trail: host:port, or an http:// or https:// URL"`
	AuditS3AccessKey string        `env:"CONCH_AUDIT_S3_ACCESS_KEY" usage:"S3 access key of the audit trail"`
	AuditS3SecretKey string        `env:"CONCH_AUDIT_S3_SECRET_KEY" usage:"S3 secret key of the audit trail"`
	AuditS3Bucket    string        `env:"CONCH_AUDIT_S3_BUCKET" default:"conch-audit" usage:"S3 bucket of the audit trail"`
	AuditS3Secure    bool          `env:"CONCH_AUDIT_S3_SECURE" usage:"use HTTPS to reach the audit trail's S3"`
	AuditFlush       time.Duration `flag:"audit-flush" env:"CONCH_AUDIT_FLUSH" default:"2s" usage:"how often audit records are written; a crash loses at most this window"`
	AuditBuffer      int           `flag:"audit-buffer" env:"CONCH_AUDIT_BUFFER" default:"10000" usage:"audit records held while the object store is slow or down; more are dropped, counted and logged"`
	AuditRetention   time.Duration `flag:"audit-retention" env:"CONCH_AUDIT_RETENTION" default:"2160h" usage:"how long audit segments are kept (default 90 days)"`
}

// Validate checks the audit settings.
func (c *AuditConfig) Validate() error {
	if c.AuditS3Endpoint != "" && (c.AuditS3AccessKey == "" || c.AuditS3SecretKey == "") {
		return config.Invalid("CONCH_AUDIT_S3_ACCESS_KEY", "CONCH_AUDIT_S3_ACCESS_KEY and CONCH_AUDIT_S3_SECRET_KEY are required with CONCH_AUDIT_S3_ENDPOINT")
	}
	if c.AuditFlush <= 0 {
		return config.Invalid("--audit-flush", "must be positive")
	}
	if c.AuditBuffer < 1 {
		return config.Invalid("--audit-buffer", "must be at least 1")
	}
	if c.AuditRetention < time.Hour {
		return config.Invalid("--audit-retention", "must be at least 1h")
	}
	return nil
}
