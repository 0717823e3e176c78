package launch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/minio/madmin-go/v3"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/conch-sh/conch/services/internal/store/miniotest"
)

// TestMinIOAuth runs `conch minio-auth` against a real MinIO, twice as a
// deployment does on every upgrade: afterwards each service's keys read
// and write exactly its own bucket, and reach neither another service's
// bucket, nor bucket settings, nor the admin API. A policy attached by hand and a
// changed secret are put right by the next run.
func TestMinIOAuth(t *testing.T) {
	t.Parallel()
	m := miniotest.Start(t)
	cfg := MinIOAuthConfig{
		Endpoint: "http://" + m.Endpoint, RootUser: m.AccessKey, RootPassword: m.SecretKey,
		WorkspaceKey: "workspace", WorkspaceSec: "workspace-secret-1", WorkspaceBkt: "conch",
		AuditKey: "approval", AuditSec: "approval-secret-1", AuditBkt: "conch-audit",
		RouterKey: "router", RouterSec: "router-secret-1", RouterBkt: "conch-responses",
		Wait: 30 * time.Second, LogLevel: "error",
	}
	run := func(t *testing.T) {
		t.Helper()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := RunMinIOAuth(t.Context(), cfg, &out); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("MinIO users workspace (%s), approval (%s) and router (%s) each limited to their bucket\n", cfg.WorkspaceBkt, cfg.AuditBkt, cfg.RouterBkt)
		if out.String() != want {
			t.Errorf("minio-auth said %q, want %q", out.String(), want)
		}
	}
	run(t)
	run(t)

	workspace := s3Client(t, m.Endpoint, cfg.WorkspaceKey, cfg.WorkspaceSec)
	approval := s3Client(t, m.Endpoint, cfg.AuditKey, cfg.AuditSec)
	router := s3Client(t, m.Endpoint, cfg.RouterKey, cfg.RouterSec)
	buckets := []string{cfg.WorkspaceBkt, cfg.AuditBkt, cfg.RouterBkt}
	confined := func(t *testing.T, c *minio.Client, own string) {
		t.Helper()
		ctx := t.Context()
		if err := roundTrip(ctx, c, own); err != nil {
			t.Errorf("in its own bucket %s: %v", own, err)
		}
		for _, other := range buckets {
			if other == own {
				continue
			}
			if _, err := c.PutObject(ctx, other, "x", bytes.NewReader([]byte("x")), 1, minio.PutObjectOptions{}); !denied(err) {
				t.Errorf("put into %s: %v, want access denied", other, err)
			}
			if _, err := c.StatObject(ctx, other, "probe", minio.StatObjectOptions{}); !denied(err) {
				t.Errorf("stat in %s: %v, want access denied", other, err)
			}
			for o := range c.ListObjects(ctx, other, minio.ListObjectsOptions{}) {
				if !denied(o.Err) {
					t.Errorf("list %s: %v, want access denied", other, o.Err)
				}
			}
		}
		if err := c.MakeBucket(ctx, "made-by-a-service", minio.MakeBucketOptions{}); !denied(err) {
			t.Errorf("make bucket: %v, want access denied", err)
		}
		if err := c.SetBucketPolicy(ctx, own, `{"Version":"2012-10-17","Statement":[]}`); !denied(err) {
			t.Errorf("set its bucket's policy: %v, want access denied", err)
		}
		if err := c.RemoveBucket(ctx, own); !denied(err) {
			t.Errorf("remove its bucket: %v, want access denied", err)
		}
	}
	// A probe object in each bucket, put as root, so that a stat that
	// was let through would find it.
	root := s3Client(t, m.Endpoint, m.AccessKey, m.SecretKey)
	for _, b := range buckets {
		if _, err := root.PutObject(t.Context(), b, "probe", bytes.NewReader([]byte("p")), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("workspace", func(t *testing.T) { confined(t, workspace, cfg.WorkspaceBkt) })
	t.Run("approval", func(t *testing.T) { confined(t, approval, cfg.AuditBkt) })
	t.Run("router", func(t *testing.T) { confined(t, router, cfg.RouterBkt) })

	adm, err := madmin.NewWithOptions(m.Endpoint, &madmin.Options{Creds: credentials.NewStaticV4(cfg.WorkspaceKey, cfg.WorkspaceSec, "")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ListUsers(t.Context()); err == nil {
		t.Error("the workspace's keys listed MinIO's users")
	}

	t.Run("put right on the next run", func(t *testing.T) {
		rootAdm, err := madmin.NewWithOptions(m.Endpoint, &madmin.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rootAdm.AttachPolicy(t.Context(), madmin.PolicyAssociationReq{User: cfg.WorkspaceKey, Policies: []string{"readwrite"}}); err != nil {
			t.Fatal(err)
		}
		if err := roundTrip(t.Context(), workspace, cfg.AuditBkt); err != nil {
			t.Fatalf("readwrite attached by hand did not take: %v", err)
		}
		cfg.WorkspaceSec = "workspace-secret-2"
		run(t)
		if _, err := workspace.BucketExists(t.Context(), cfg.WorkspaceBkt); !denied(err) {
			t.Errorf("the old secret after rotation: %v, want refused", err)
		}
		rotated := s3Client(t, m.Endpoint, cfg.WorkspaceKey, cfg.WorkspaceSec)
		confined(t, rotated, cfg.WorkspaceBkt)
	})

	// Beside MinIO, with --every, it keeps putting them right.
	t.Run("every", func(t *testing.T) {
		rootAdm, err := madmin.NewWithOptions(m.Endpoint, &madmin.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
		if err != nil {
			t.Fatal(err)
		}
		c := cfg
		c.Every = 100 * time.Millisecond
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		rounds := make(chan struct{}, 100)
		go func() { done <- RunMinIOAuth(ctx, c, signalWriter(rounds)) }()
		// Put right once; the change by hand comes after.
		select {
		case <-rounds:
		case <-time.After(30 * time.Second):
			t.Fatal("minio-auth --every made no round in 30s")
		}
		if _, err := rootAdm.AttachPolicy(t.Context(), madmin.PolicyAssociationReq{User: c.AuditKey, Policies: []string{"readwrite"}}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			info, err := rootAdm.GetUserInfo(t.Context(), c.AuditKey)
			if err != nil {
				t.Fatal(err)
			}
			if info.PolicyName == MinIOPolicyName("approval") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the approval user still holds %q", info.PolicyName)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("minio-auth --every ended with %v, want nil on shutdown", err)
		}
	})
}

// TestMinIOAuthRefuses is what minio-auth refuses before it touches
// MinIO: settings that would not keep the services apart.
func TestMinIOAuthRefuses(t *testing.T) {
	t.Parallel()
	good := MinIOAuthConfig{
		Endpoint: "minio:9000", RootUser: "root", RootPassword: "root-password",
		WorkspaceKey: "workspace", WorkspaceSec: "s1s1s1s1", WorkspaceBkt: "conch",
		AuditKey: "approval", AuditSec: "s2s2s2s2", AuditBkt: "conch-audit",
		RouterKey: "router", RouterSec: "s3s3s3s3", RouterBkt: "conch-responses",
		Wait: time.Minute, LogLevel: "info",
	}
	for _, tc := range []struct {
		name string
		edit func(*MinIOAuthConfig)
		want string
	}{
		{"no endpoint", func(c *MinIOAuthConfig) { c.Endpoint = "" }, "CONCH_S3_ENDPOINT"},
		{"no root password", func(c *MinIOAuthConfig) { c.RootPassword = "" }, "MINIO_ROOT_PASSWORD"},
		{"service without keys", func(c *MinIOAuthConfig) { c.AuditSec = "" }, "the approval service needs an access key, a secret key and a bucket"},
		{"root's key", func(c *MinIOAuthConfig) { c.WorkspaceKey = "root" }, "the workspace service's access key is MinIO's root user"},
		{"shared key", func(c *MinIOAuthConfig) { c.AuditKey = "workspace" }, `the workspace and approval services share the access key "workspace"`},
		{"shared bucket", func(c *MinIOAuthConfig) { c.AuditBkt = "conch" }, `the workspace and approval services share the bucket "conch"`},
		{"router without keys", func(c *MinIOAuthConfig) { c.RouterKey = "" }, "the router service needs an access key, a secret key and a bucket"},
		{"router without bucket", func(c *MinIOAuthConfig) { c.RouterBkt = "" }, "the router service needs an access key, a secret key and a bucket"},
		{"router with root's key", func(c *MinIOAuthConfig) { c.RouterKey = "root" }, "the router service's access key is MinIO's root user"},
		{"router with the audit key", func(c *MinIOAuthConfig) { c.RouterKey = "approval" }, `the approval and router services share the access key "approval"`},
		{"router with the workspaces' bucket", func(c *MinIOAuthConfig) { c.RouterBkt = "conch" }, `the workspace and router services share the bucket "conch"`},
		{"router with the audit bucket", func(c *MinIOAuthConfig) { c.RouterBkt = "conch-audit" }, `the approval and router services share the bucket "conch-audit"`},
		{"no wait", func(c *MinIOAuthConfig) { c.Wait = 0 }, "--wait"},
		{"negative every", func(c *MinIOAuthConfig) { c.Every = -time.Second }, "--every"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("good settings: %v", err)
	}
}

// signalWriter sends on its channel for every write, dropping what finds
// it full.
type signalWriter chan struct{}

func (w signalWriter) Write(p []byte) (int, error) {
	select {
	case w <- struct{}{}:
	default:
	}
	return len(p), nil
}

func s3Client(t *testing.T, endpoint, access, secret string) *minio.Client {
	t.Helper()
	c, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(access, secret, "")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// roundTrip writes, lists, reads and deletes an object of bucket.
func roundTrip(ctx context.Context, c *minio.Client, bucket string) error {
	if _, err := c.PutObject(ctx, bucket, "rt", bytes.NewReader([]byte("data")), 4, minio.PutObjectOptions{}); err != nil {
		return err
	}
	for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{}) {
		if o.Err != nil {
			return o.Err
		}
	}
	r, err := c.GetObject(ctx, bucket, "rt", minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := io.ReadAll(r); err != nil {
		return err
	}
	return c.RemoveObject(ctx, bucket, "rt", minio.RemoveObjectOptions{})
}

// denied reports whether err is S3's refusal of the caller.
func denied(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch"
}
