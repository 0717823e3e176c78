package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/minio/madmin-go/v3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/platform/logging"
)

// minioAuthRetry is the pause between attempts of `conch minio-auth`
// while MinIO does not answer yet.
const minioAuthRetry = 2 * time.Second

// MinIOUser is one service's own MinIO user: its keys and the one bucket
// its policy (conch-<Service>) lets it use. No service holds MinIO's root
// credentials or reaches another service's bucket.
type MinIOUser struct {
	Service              string
	AccessKey, SecretKey string
	Bucket               string
}

// MinIOAuthConfig is the configuration of `conch minio-auth`. The
// services' keys and buckets are read from the variables the services
// themselves read (the workspace's CONCH_S3_*, the approval service's
// CONCH_AUDIT_S3_*, the router's CONCH_RESPONSES_S3_*), and root's from
// the variables MinIO reads, so that a deployment hands each the same env
// files.
type MinIOAuthConfig struct {
	Endpoint     string        `flag:"endpoint" env:"CONCH_S3_ENDPOINT" usage:"MinIO's S3 endpoint: host:port, or an http:// or https:// URL"`
	Secure       bool          `flag:"secure" env:"CONCH_S3_SECURE" usage:"use HTTPS to reach MinIO"`
	RootUser     string        `env:"MINIO_ROOT_USER" usage:"MinIO's root user"`
	RootPassword string        `env:"MINIO_ROOT_PASSWORD" usage:"MinIO's root password"`
	WorkspaceKey string        `env:"CONCH_S3_ACCESS_KEY" usage:"the workspace service's access key"`
	WorkspaceSec string        `env:"CONCH_S3_SECRET_KEY" usage:"the workspace service's secret key"`
	WorkspaceBkt string        `env:"CONCH_S3_BUCKET" default:"conch" usage:"the workspaces' bucket"`
	AuditKey     string        `env:"CONCH_AUDIT_S3_ACCESS_KEY" usage:"the approval service's access key (the audit trail)"`
	AuditSec     string        `env:"CONCH_AUDIT_S3_SECRET_KEY" usage:"the approval service's secret key"`
	AuditBkt     string        `env:"CONCH_AUDIT_S3_BUCKET" default:"conch-audit" usage:"the audit trail's bucket"`
	RouterKey    string        `env:"CONCH_RESPONSES_S3_ACCESS_KEY" usage:"the router's access key (stored responses)"`
	RouterSec    string        `env:"CONCH_RESPONSES_S3_SECRET_KEY" usage:"the router's secret key"`
	RouterBkt    string        `env:"CONCH_RESPONSES_S3_BUCKET" default:"conch-responses" usage:"the stored responses' bucket"`
	Wait         time.Duration `flag:"wait" env:"CONCH_MINIO_AUTH_WAIT" default:"2m" usage:"how long to retry while MinIO does not answer (still starting)"`
	Every        time.Duration `flag:"every" env:"CONCH_MINIO_AUTH_EVERY" usage:"keep running and put the users right again this often (a container beside MinIO); 0: once, then exit"`
	LogLevel     string        `flag:"log-level" env:"CONCH_LOG_LEVEL" default:"info" usage:"debug, info, warn or error"`
}

// Validate checks the settings.
func (c *MinIOAuthConfig) Validate() error {
	switch {
	case c.Endpoint == "":
		return config.Invalid("CONCH_S3_ENDPOINT", "is required")
	case c.RootUser == "" || c.RootPassword == "":
		return config.Invalid("MINIO_ROOT_USER", "MINIO_ROOT_USER and MINIO_ROOT_PASSWORD are required")
	case c.Wait <= 0:
		return config.Invalid("--wait", "must be positive")
	case c.Every < 0:
		return config.Invalid("--every", "must not be negative")
	}
	if _, err := logging.ParseLevel(c.LogLevel); err != nil {
		return config.Invalid("--log-level", "%v", err)
	}
	return checkMinIOUsers(c.RootUser, c.users())
}

// users are the services' users that cfg names.
func (c *MinIOAuthConfig) users() []MinIOUser {
	return []MinIOUser{
		{Service: "workspace", AccessKey: c.WorkspaceKey, SecretKey: c.WorkspaceSec, Bucket: c.WorkspaceBkt},
		{Service: "approval", AccessKey: c.AuditKey, SecretKey: c.AuditSec, Bucket: c.AuditBkt},
		{Service: "router", AccessKey: c.RouterKey, SecretKey: c.RouterSec, Bucket: c.RouterBkt},
	}
}

// checkMinIOUsers refuses users that would not keep services apart: a
// user without keys or bucket, root's own key, or one key or one bucket
// shared by two services.
func checkMinIOUsers(root string, users []MinIOUser) error {
	keys, buckets := map[string]string{}, map[string]string{}
	for _, u := range users {
		if u.AccessKey == "" || u.SecretKey == "" || u.Bucket == "" {
			return fmt.Errorf("minio-auth: the %s service needs an access key, a secret key and a bucket", u.Service)
		}
		if u.AccessKey == root {
			return fmt.Errorf("minio-auth: the %s service's access key is MinIO's root user; give it its own", u.Service)
		}
		if other, ok := keys[u.AccessKey]; ok {
			return fmt.Errorf("minio-auth: the %s and %s services share the access key %q; give each its own", other, u.Service, u.AccessKey)
		}
		if other, ok := buckets[u.Bucket]; ok {
			return fmt.Errorf("minio-auth: the %s and %s services share the bucket %q; give each its own", other, u.Service, u.Bucket)
		}
		keys[u.AccessKey], buckets[u.Bucket] = u.Service, u.Service
	}
	return nil
}

// RunMinIOAuth runs `conch minio-auth`: as MinIO's root user it makes each
// service's bucket, a policy limited to that bucket and a user holding
// only that policy, retrying for up to cfg.Wait while MinIO does not
// answer. Run again, it changes nothing that is right already and puts
// back what is not (a changed secret, a policy attached by hand), so a
// deployment runs it on every install and upgrade, or keeps it running
// beside MinIO with cfg.Every.
func RunMinIOAuth(ctx context.Context, cfg MinIOAuthConfig, out io.Writer) error {
	lvl, err := logging.ParseLevel(cfg.LogLevel)
	if err != nil {
		return err
	}
	log := logging.New(os.Stderr, lvl)
	for {
		err := ensureMinIOUsersWaiting(ctx, cfg, log)
		if err == nil {
			fmt.Fprintf(out, "MinIO users %s each limited to their bucket\n", userList(cfg.users()))
		}
		if cfg.Every == 0 {
			return err
		}
		if err != nil {
			log.Error("MinIO users not set up; trying again later", "err", err, "retry_in", cfg.Every)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.Every):
		}
	}
}

// userList names users and their buckets: "workspace (conch),
// approval (conch-audit) and router (conch-responses)".
func userList(users []MinIOUser) string {
	var b strings.Builder
	for i, u := range users {
		switch {
		case i == 0:
		case i == len(users)-1:
			b.WriteString(" and ")
		default:
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", u.Service, u.Bucket)
	}
	return b.String()
}

// ensureMinIOUsersWaiting is EnsureMinIOUsers retried for up to cfg.Wait
// while MinIO does not answer.
func ensureMinIOUsersWaiting(ctx context.Context, cfg MinIOAuthConfig, log *slog.Logger) error {
	endpoint, secure := s3Endpoint(cfg.Endpoint, cfg.Secure)
	return EnsureMinIOUsersWaiting(ctx, endpoint, secure, cfg.RootUser, cfg.RootPassword, cfg.users(), cfg.Wait, log)
}

// EnsureMinIOUsersWaiting is EnsureMinIOUsers retried for up to wait
// while MinIO does not answer, or has not yet taken in a policy it was
// just given (a MinIO that has just started loads its IAM state in the
// background).
func EnsureMinIOUsersWaiting(ctx context.Context, endpoint string, secure bool, rootUser, rootPassword string, users []MinIOUser, wait time.Duration, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		err := EnsureMinIOUsers(ctx, endpoint, secure, rootUser, rootPassword, users)
		if err == nil || !retryable(err) {
			return err
		}
		log.Warn("MinIO users not set up yet; retrying", "err", err, "retry_in", minioAuthRetry)
		select {
		case <-ctx.Done():
			return fmt.Errorf("minio-auth: gave up after %v: %w", wait, err)
		case <-time.After(minioAuthRetry):
		}
	}
}

// retryable reports whether err may pass once MinIO has started: any
// error but a refusal of the root credentials.
func retryable(err error) bool {
	var code string
	var adm madmin.ErrorResponse
	var s3 minio.ErrorResponse
	switch {
	case errors.As(err, &adm):
		code = adm.Code
	case errors.As(err, &s3):
		code = s3.Code
	}
	switch code {
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied":
		return false
	}
	return true
}

// EnsureMinIOUsers makes, as root, each user's bucket, its policy and the
// user with exactly that policy: one attempt of RunMinIOAuth, and the
// local cluster's step.
func EnsureMinIOUsers(ctx context.Context, endpoint string, secure bool, rootUser, rootPassword string, users []MinIOUser) error {
	if err := checkMinIOUsers(rootUser, users); err != nil {
		return err
	}
	creds := credentials.NewStaticV4(rootUser, rootPassword, "")
	s3c, err := minio.New(endpoint, &minio.Options{Creds: creds, Secure: secure})
	if err != nil {
		return fmt.Errorf("minio-auth: %w", err)
	}
	adm, err := madmin.NewWithOptions(endpoint, &madmin.Options{Creds: creds, Secure: secure})
	if err != nil {
		return fmt.Errorf("minio-auth: %w", err)
	}
	for _, u := range users {
		if err := ensureMinIOUser(ctx, s3c, adm, u); err != nil {
			return fmt.Errorf("minio-auth: the %s service: %w", u.Service, err)
		}
	}
	return nil
}

func ensureMinIOUser(ctx context.Context, s3c *minio.Client, adm *madmin.AdminClient, u MinIOUser) error {
	ok, err := s3c.BucketExists(ctx, u.Bucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", u.Bucket, err)
	}
	if !ok {
		if err := s3c.MakeBucket(ctx, u.Bucket, minio.MakeBucketOptions{}); err != nil {
			var resp minio.ErrorResponse
			if !errors.As(err, &resp) || resp.Code != "BucketAlreadyOwnedByYou" {
				return fmt.Errorf("make bucket %s: %w", u.Bucket, err)
			}
		}
	}
	policy := MinIOPolicyName(u.Service)
	if err := adm.AddCannedPolicy(ctx, policy, bucketPolicy(u.Bucket)); err != nil {
		return fmt.Errorf("policy %s: %w", policy, err)
	}
	// AddUser sets the secret of a user that exists.
	if err := adm.AddUser(ctx, u.AccessKey, u.SecretKey); err != nil {
		return fmt.Errorf("user %s: %w", u.AccessKey, err)
	}
	if err := adm.SetUserStatus(ctx, u.AccessKey, madmin.AccountEnabled); err != nil {
		return fmt.Errorf("user %s: %w", u.AccessKey, err)
	}
	info, err := adm.GetUserInfo(ctx, u.AccessKey)
	if err != nil {
		return fmt.Errorf("user %s: %w", u.AccessKey, err)
	}
	if len(info.MemberOf) > 0 {
		// A group's policies would reach past the bucket.
		return fmt.Errorf("user %s is a member of the groups %s; remove it from them", u.AccessKey, strings.Join(info.MemberOf, ", "))
	}
	var other []string
	attached := false
	for p := range strings.SplitSeq(info.PolicyName, ",") {
		switch p = strings.TrimSpace(p); p {
		case "":
		case policy:
			attached = true
		default:
			other = append(other, p)
		}
	}
	if len(other) > 0 {
		if _, err := adm.DetachPolicy(ctx, madmin.PolicyAssociationReq{User: u.AccessKey, Policies: other}); err != nil {
			return fmt.Errorf("user %s: detach %s: %w", u.AccessKey, strings.Join(other, ", "), err)
		}
	}
	if !attached {
		if _, err := adm.AttachPolicy(ctx, madmin.PolicyAssociationReq{User: u.AccessKey, Policies: []string{policy}}); err != nil {
			return fmt.Errorf("user %s: attach %s: %w", u.AccessKey, policy, err)
		}
	}
	return nil
}

// MinIOPolicyName is the name of service's MinIO policy.
func MinIOPolicyName(service string) string { return "conch-" + service }

// bucketPolicy is an IAM policy that lets its holder list, read, write
// and delete objects of bucket (and abort its unfinished uploads), and
// nothing else: no other bucket, no bucket settings, no admin API.
func bucketPolicy(bucket string) []byte {
	type statement struct {
		Effect   string
		Action   []string
		Resource []string
	}
	arn := "arn:aws:s3:::" + bucket
	b, err := json.Marshal(struct {
		Version   string
		Statement []statement
	}{
		Version: "2012-10-17",
		Statement: []statement{
			{Effect: "Allow", Action: []string{"s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"}, Resource: []string{arn}},
			{Effect: "Allow", Action: []string{"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"}, Resource: []string{arn + "/*"}},
		},
	})
	if err != nil {
		panic(err) // a fixed shape of strings always marshals
	}
	return b
}
