package launch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/internal/signing"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/internal/store/s3store"
	"github.com/conch-sh/conch/services/workspace"
	"github.com/conch-sh/conch/services/workspace/files"
	"github.com/conch-sh/conch/services/workspace/snapshots"
	"github.com/conch-sh/conch/services/workspace/templates"
)

// objectStorage is an S3 bucket when an endpoint is set, else a local
// directory.
type objectStorage struct {
	dir                              string
	endpoint, access, secret, bucket string
	secure                           bool
}

// openStore opens the object store c describes.
func openStore(ctx context.Context, c objectStorage) (store.Store, error) {
	if c.endpoint == "" {
		return fsstore.New(c.dir)
	}
	endpoint, secure := s3Endpoint(c.endpoint, c.secure)
	return s3store.New(ctx, s3store.Options{Endpoint: endpoint, AccessKey: c.access, SecretKey: c.secret, Bucket: c.bucket, Secure: secure})
}

// s3Endpoint splits an endpoint written as host:port or as a URL, whose
// scheme decides TLS, into host:port and whether to use TLS.
func s3Endpoint(endpoint string, secure bool) (string, bool) {
	for _, scheme := range []string{"https://", "http://"} {
		if rest, ok := strings.CutPrefix(endpoint, scheme); ok {
			return strings.TrimRight(rest, "/"), scheme == "https://"
		}
	}
	return strings.TrimRight(endpoint, "/"), secure
}

// RunWorkspace runs `conch workspace`.
func RunWorkspace(ctx context.Context, cfg WorkspaceConfig) error {
	return runService(ctx, "workspace", &cfg.Common, buildWorkspace(cfg.Config))
}

// buildWorkspace builds the workspace service on the storage cfg names.
// Its background work collects stale uploads; closing frees its locks.
func buildWorkspace(cfg workspace.Config) builder {
	return func(ctx context.Context, p *process, c *component) error {
		st, err := openStore(ctx, objectStorage{dir: cfg.Dir, endpoint: cfg.S3Endpoint, access: cfg.S3AccessKey, secret: cfg.S3SecretKey, bucket: cfg.S3Bucket, secure: cfg.S3Secure})
		if err != nil {
			return fmt.Errorf("workspace storage: %w", err)
		}
		keys, err := signing.ParseKeys(cfg.SigningKeys)
		if err != nil {
			return err
		}
		signer, err := signing.New(keys)
		if err != nil {
			return err
		}
		fsvc, err := files.New(st, p.etcd, files.Config{QuotaBytes: cfg.QuotaBytes, QuotaFiles: cfg.QuotaFiles})
		if err != nil {
			return err
		}
		c.onClose(fsvc.Close)
		srv, err := workspace.New(fsvc, snapshots.New(st), signer)
		if err != nil {
			return err
		}
		// A registry is a tenant's URL: it is reached through the guard.
		tpl := templates.New(st, templates.Config{
			MaxTemplates: cfg.MaxTemplates, MaxBytes: cfg.MaxTemplateBytes, MaxFiles: cfg.MaxTemplateFiles,
			Registries: cfg.TemplateRegistries, Insecure: cfg.TemplateInsecureRegistries,
			Transport: p.outbound.Transport(), BuildDir: cfg.TemplateBuildDir, Logger: p.log,
		})
		c.onClose(tpl.Close)
		tsrv, err := workspace.NewTemplates(tpl)
		if err != nil {
			return err
		}
		c.register = func(g *grpc.Server) {
			srv.Register(g)
			tsrv.Register(g)
		}
		c.run = fsvc.Run
		return nil
	}
}

// devSigningKeys returns CONCH_SIGNING_KEYS, else the key kept in the data
// dir (created once), so public URLs survive a restart of conch dev.
func devSigningKeys(cfg DevConfig) (string, error) {
	if cfg.SigningKeys != "" {
		if _, err := signing.ParseKeys(cfg.SigningKeys); err != nil {
			return "", config.Invalid("CONCH_SIGNING_KEYS", "%v", err)
		}
		return cfg.SigningKeys, nil
	}
	path := filepath.Join(cfg.DataDir, "signing-key")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		return strings.TrimSpace(string(b)), nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("dev: read signing key: %w", err)
	}
	keys := "dev:" + randomSecret()
	if err := os.WriteFile(path, []byte(keys+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("dev: write signing key: %w", err)
	}
	return keys, nil
}
