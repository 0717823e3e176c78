package launch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/conch-sh/conch/services/internal/platform/config"
	"github.com/conch-sh/conch/services/workspace"
	"github.com/conch-sh/conch/services/workspace/files"
	"github.com/conch-sh/conch/services/workspace/signing"
	"github.com/conch-sh/conch/services/workspace/store"
	"github.com/conch-sh/conch/services/workspace/store/fsstore"
	"github.com/conch-sh/conch/services/workspace/store/s3store"
)

// workspaceStorage is where workspaces live: S3 when an endpoint is set,
// else a local directory.
type workspaceStorage struct {
	dir                              string
	endpoint, access, secret, bucket string
	secure                           bool
	signingKeys                      string
	quotaBytes, quotaFiles           int64
}

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
	// Accept "host:port" as well as a URL, whose scheme decides TLS.
	endpoint, secure := c.endpoint, c.secure
	if rest, ok := strings.CutPrefix(endpoint, "https://"); ok {
		endpoint, secure = rest, true
	} else if rest, ok := strings.CutPrefix(endpoint, "http://"); ok {
		endpoint = rest
	}
	return s3store.New(ctx, s3store.Options{Endpoint: strings.TrimRight(endpoint, "/"), AccessKey: c.access, SecretKey: c.secret, Bucket: c.bucket, Secure: secure})
}

// newWorkspace builds the workspace service; run is its background work
// (collecting stale uploads), release frees its locks.
func (p *process) newWorkspace(ctx context.Context, c workspaceStorage) (srv *workspace.Server, run func(context.Context) error, release func(), err error) {
	st, err := openStore(ctx, objectStorage{dir: c.dir, endpoint: c.endpoint, access: c.access, secret: c.secret, bucket: c.bucket, secure: c.secure})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("workspace storage: %w", err)
	}
	keys, err := signing.ParseKeys(c.signingKeys)
	if err != nil {
		return nil, nil, nil, err
	}
	signer, err := signing.New(keys)
	if err != nil {
		return nil, nil, nil, err
	}
	fsvc, err := files.New(st, p.etcd, files.Config{QuotaBytes: c.quotaBytes, QuotaFiles: c.quotaFiles})
	if err != nil {
		return nil, nil, nil, err
	}
	if srv, err = workspace.New(fsvc, signer); err != nil {
		fsvc.Close()
		return nil, nil, nil, err
	}
	return srv, fsvc.Run, fsvc.Close, nil
}

// RunWorkspace runs `conch workspace`.
func RunWorkspace(ctx context.Context, cfg WorkspaceConfig) error {
	p, err := newProcess(ctx, "conch-workspace", &cfg.Common)
	if err != nil {
		return err
	}
	defer p.close(ctx)
	srv, run, closeWS, err := p.newWorkspace(ctx, workspaceStorage{
		dir: cfg.Dir, endpoint: cfg.S3Endpoint, access: cfg.S3AccessKey, secret: cfg.S3SecretKey, bucket: cfg.S3Bucket, secure: cfg.S3Secure,
		signingKeys: cfg.SigningKeys, quotaBytes: cfg.QuotaBytes, quotaFiles: cfg.QuotaFiles,
	})
	if err != nil {
		return err
	}
	defer closeWS()
	return p.runService(ctx, "workspace", &cfg.Common, srv.Register, run)
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
