package workspace

import (
	"slices"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/signing"
)

// Config is the workspace service's own configuration: the settings of
// `conch workspace` beyond those every service shares.
type Config struct {
	// Dir keeps workspaces on local disk when no S3 endpoint is set.
	Dir         string `flag:"dir" env:"CONCH_WORKSPACE_DIR" usage:"local directory for workspaces when CONCH_S3_ENDPOINT is not set (one instance only)"`
	S3Endpoint  string `env:"CONCH_S3_ENDPOINT" usage:"S3 endpoint for workspaces: host:port, or an http:// or https:// URL"`
	S3AccessKey string `env:"CONCH_S3_ACCESS_KEY" usage:"S3 access key"`
	S3SecretKey string `env:"CONCH_S3_SECRET_KEY" usage:"S3 secret key"`
	S3Bucket    string `env:"CONCH_S3_BUCKET" default:"conch" usage:"S3 bucket for workspaces"`
	S3Secure    bool   `env:"CONCH_S3_SECURE" usage:"use HTTPS to reach S3"`
	SigningKeys string `env:"CONCH_SIGNING_KEYS" usage:"keys of public file URLs, id:secret[,id:secret...] (secrets of 32+ bytes); the first signs, all verify"`
	// QuotaBytes and QuotaFiles default (0) to package quota's, the
	// gateways' defaults, so that the service refuses what a sandbox would.
	QuotaBytes int64 `flag:"quota-bytes" env:"CONCH_WORKSPACE_QUOTA_BYTES" usage:"bytes one workspace may store (0: the default of 1 GiB)"`
	QuotaFiles int64 `flag:"quota-files" env:"CONCH_WORKSPACE_QUOTA_FILES" usage:"files and directories one workspace may hold (0: the default of 100000)"`
	TemplateConfig
}

// Validate checks the workspace service's settings.
func (c *Config) Validate() error {
	if c.S3Endpoint == "" && c.Dir == "" {
		return config.Invalid("CONCH_S3_ENDPOINT", "set CONCH_S3_ENDPOINT (with CONCH_S3_ACCESS_KEY and CONCH_S3_SECRET_KEY) or --dir")
	}
	if c.S3Endpoint != "" && (c.S3AccessKey == "" || c.S3SecretKey == "") {
		return config.Invalid("CONCH_S3_ACCESS_KEY", "CONCH_S3_ACCESS_KEY and CONCH_S3_SECRET_KEY are required with CONCH_S3_ENDPOINT")
	}
	if _, err := signing.ParseKeys(c.SigningKeys); err != nil {
		return config.Invalid("CONCH_SIGNING_KEYS", "%v", err)
	}
	if c.QuotaBytes < 0 {
		return config.Invalid("--quota-bytes", "must not be negative")
	}
	if err := c.TemplateConfig.Validate(); err != nil {
		return err
	}
	if c.QuotaFiles < 0 {
		return config.Invalid("--quota-files", "must not be negative")
	}
	return nil
}

// TemplateConfig bounds templates and names the registries they may be
// pulled from: the workspace service's settings that `conch dev` takes
// too.
type TemplateConfig struct {
	MaxTemplates               int      `flag:"max-templates" env:"CONCH_MAX_TEMPLATES" default:"20" usage:"templates one account may keep"`
	MaxTemplateBytes           int64    `flag:"max-template-bytes" env:"CONCH_MAX_TEMPLATE_BYTES" default:"4294967296" usage:"bytes of one template's image archive, and of its flattened root's files"`
	MaxTemplateFiles           int      `flag:"max-template-files" env:"CONCH_MAX_TEMPLATE_FILES" default:"500000" usage:"files, directories and links of one template's flattened root"`
	TemplateRegistries         []string `flag:"template-registries" env:"CONCH_TEMPLATE_REGISTRIES" usage:"registries (host[:port]) templates may be pulled from, comma separated; empty: none, only uploaded archives"`
	TemplateInsecureRegistries []string `flag:"template-insecure-registries" env:"CONCH_TEMPLATE_INSECURE_REGISTRIES" usage:"of --template-registries, those reached over plain HTTP"`
	TemplateBuildDir           string   `flag:"template-build-dir" env:"CONCH_TEMPLATE_BUILD_DIR" usage:"local directory holding image archives and roots while templates are built (default: the system's temporary directory)"`
}

// Validate checks the template settings.
func (c *TemplateConfig) Validate() error {
	if c.MaxTemplates < 0 || c.MaxTemplateBytes <= 0 || c.MaxTemplateFiles <= 0 {
		return config.Invalid("--max-template-bytes", "--max-templates must not be negative; --max-template-bytes and --max-template-files must be positive")
	}
	for _, r := range c.TemplateInsecureRegistries {
		if !slices.Contains(c.TemplateRegistries, r) {
			return config.Invalid("--template-insecure-registries", "%s is not one of --template-registries", r)
		}
	}
	return nil
}
