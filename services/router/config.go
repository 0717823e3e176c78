package router

import (
	"net"
	"net/url"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/seal"
)

// Config is the router's own configuration: the settings of `conch router`
// beyond those every service shares. `conch dev` builds one from its own
// settings.
type Config struct {
	HTTPAddr string `flag:"http-addr" env:"CONCH_HTTP_ADDR" default:"127.0.0.1:8080" usage:"public HTTP listen address"`
	// PublicURL is the base of links the router hands out; empty means the
	// request's own scheme and host.
	PublicURL string `flag:"public-url" env:"CONCH_PUBLIC_URL" usage:"public base URL of the router, for links it hands out (default: the request's host)"`
	// AdminKey authenticates as the admin of AdminAccount; empty: no admin.
	AdminKey string `env:"CONCH_ADMIN_KEY" usage:"API key of the admin, who manages accounts"`
	// AdminAccount is the account of the admin key.
	AdminAccount string `flag:"admin-account" env:"CONCH_ADMIN_ACCOUNT" default:"admin" usage:"account id of the admin key"`
	HTTPConfig
	// KeyConfig holds the keys that seal the gateways' secrets in etcd.
	seal.KeyConfig
	ResponseStorage
}

// ResponseStorage is where the Responses API keeps stored responses (their
// bodies and conversations; etcd keeps only a small record of each): a
// bucket of its own, which the router alone may use, or a directory for a
// router that runs alone (conch dev).
type ResponseStorage struct {
	ResponsesDir        string `flag:"responses-dir" env:"CONCH_RESPONSES_DIR" usage:"directory for stored responses when CONCH_RESPONSES_S3_ENDPOINT is not set (one router only)"`
	ResponsesS3Endpoint string `env:"CONCH_RESPONSES_S3_ENDPOINT" usage:"S3 endpoint for stored responses: host:port, or an http:// or https:// URL"`
	ResponsesS3Access   string `env:"CONCH_RESPONSES_S3_ACCESS_KEY" usage:"S3 access key of stored responses (the router's own MinIO user)"`
	ResponsesS3Secret   string `env:"CONCH_RESPONSES_S3_SECRET_KEY" usage:"S3 secret key of stored responses"`
	ResponsesS3Bucket   string `env:"CONCH_RESPONSES_S3_BUCKET" default:"conch-responses" usage:"S3 bucket of stored responses"`
	ResponsesS3Secure   bool   `env:"CONCH_RESPONSES_S3_SECURE" usage:"use HTTPS to reach the stored responses' S3"`
}

// Validate checks that the storage is named, and named once.
func (c *ResponseStorage) Validate() error {
	switch {
	case c.ResponsesS3Endpoint == "" && c.ResponsesDir == "":
		return config.Invalid("CONCH_RESPONSES_S3_ENDPOINT", "stored responses need CONCH_RESPONSES_S3_ENDPOINT (a bucket) or CONCH_RESPONSES_DIR (a directory)")
	case c.ResponsesS3Endpoint != "" && c.ResponsesDir != "":
		return config.Invalid("CONCH_RESPONSES_DIR", "set CONCH_RESPONSES_DIR or CONCH_RESPONSES_S3_ENDPOINT, not both")
	case c.ResponsesS3Endpoint != "" && (c.ResponsesS3Access == "" || c.ResponsesS3Secret == ""):
		return config.Invalid("CONCH_RESPONSES_S3_ACCESS_KEY", "CONCH_RESPONSES_S3_ACCESS_KEY and CONCH_RESPONSES_S3_SECRET_KEY are required with CONCH_RESPONSES_S3_ENDPOINT")
	case c.ResponsesS3Endpoint != "" && c.ResponsesS3Bucket == "":
		return config.Invalid("CONCH_RESPONSES_S3_BUCKET", "must not be empty")
	}
	return nil
}

// Validate checks the router's settings.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return config.Invalid("--http-addr", "%v", err)
	}
	if c.AdminKey != "" && len(c.AdminKey) < 16 {
		return config.Invalid("CONCH_ADMIN_KEY", "must be at least 16 characters")
	}
	if err := c.HTTPConfig.Validate(); err != nil {
		return err
	}
	if err := c.KeyConfig.Validate(); err != nil {
		return err
	}
	if err := c.ResponseStorage.Validate(); err != nil {
		return err
	}
	return ValidatePublicURL(c.PublicURL)
}

// HTTPConfig tunes the router's public HTTP API, in `conch router` and
// `conch dev`.
type HTTPConfig struct {
	// UploadIdleTimeout bounds a stalled upload body.
	UploadIdleTimeout time.Duration `flag:"upload-idle-timeout" env:"CONCH_UPLOAD_IDLE_TIMEOUT" default:"30s" usage:"how long a file upload may send no bytes before it is cut"`
	// MaxConcurrentCompletions sheds load beyond what the router runs.
	MaxConcurrentCompletions int `flag:"max-concurrent-completions" env:"CONCH_MAX_CONCURRENT_COMPLETIONS" default:"512" usage:"chat completions this router runs at once; beyond, 503 with Retry-After"`
	// ApprovalPause is how long a Messages API request answered in one
	// piece waits for an approval before it answers pause_turn.
	ApprovalPause time.Duration `flag:"approval-pause" env:"CONCH_APPROVAL_PAUSE" default:"30s" usage:"how long a Messages API request without a stream waits for an approval before it answers stop_reason pause_turn, the command waiting on (0: as long as the approval)"`
	// ResponseRetention is how long the Responses API keeps a response.
	ResponseRetention time.Duration `flag:"response-retention" env:"CONCH_RESPONSE_RETENTION" default:"720h" usage:"how long a stored response of the Responses API is kept (previous_response_id, GET /v1/responses/{id})"`
}

// Validate checks the HTTP settings.
func (c *HTTPConfig) Validate() error {
	if c.UploadIdleTimeout <= 0 {
		return config.Invalid("--upload-idle-timeout", "must be positive")
	}
	if c.MaxConcurrentCompletions < 1 || c.MaxConcurrentCompletions > 1<<20 {
		return config.Invalid("--max-concurrent-completions", "must be between 1 and %d", 1<<20)
	}
	if c.ApprovalPause < 0 || c.ApprovalPause > time.Hour {
		return config.Invalid("--approval-pause", "must be between 0 and 1h")
	}
	if c.ResponseRetention < time.Minute || c.ResponseRetention > 366*24*time.Hour {
		return config.Invalid("--response-retention", "must be between 1m and 8784h (366 days)")
	}
	return nil
}

// ValidatePublicURL checks a --public-url: empty, or an absolute http(s)
// URL without query or fragment.
func ValidatePublicURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return config.Invalid("--public-url", "must be an absolute http:// or https:// URL without query or fragment")
	}
	return nil
}
