// Package templates keeps each account's templates in the object store:
// named root filesystems, flattened from container images, with the
// settings sandboxes of them start with.
//
// Layout: "accounts/<account>/templates/<name>/record.json" and, beside
// it, the flattened root "root-<hex>.tar", named by its SHA-256, which is
// also the name executors cache it by. A root is stored before the record
// that names it, so that a ready record always has its root; a replaced
// or deleted template's old roots go after its record changed.
//
// An image is built (pulled or read from an upload, checked and
// flattened, package image) on the service instance that received it,
// on local disk under Config.BuildDir. A build the instance did not live
// to finish shows as failed once older than BuildTimeout.
package templates

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/cache"

	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/execenv"
	"github.com/conch-sh/conch/services/internal/image"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/store"
)

// The statuses of a template.
const (
	Building = "building"
	Ready    = "ready"
	Failed   = "failed"
)

// Limits on a template's settings.
const (
	MaxCommandBytes = 16 << 10
	MaxWorkdirBytes = 1024
	// BuildTimeout bounds one build, pull or upload; a build older than
	// this was lost with its instance.
	BuildTimeout = 30 * time.Minute
)

const recordName = "record.json"

// ValidName reports whether name can name a template.
func ValidName(name string) bool { return contract.ValidTemplateName(name) }

// Record is a stored template.
type Record struct {
	Name         string            `json:"name"`
	Image        string            `json:"image,omitempty"`
	StartCommand string            `json:"start_command,omitempty"`
	ReadyCommand string            `json:"ready_command,omitempty"`
	Env          map[string]string `json:"env,omitempty"`     // the image's, with the user's over it
	Workdir      string            `json:"workdir,omitempty"` // the user's, else the image's
	// UserEnv and UserWorkdir are what the template was made with, kept
	// to merge with the next image.
	UserEnv     map[string]string `json:"user_env,omitempty"`
	UserWorkdir string            `json:"user_workdir,omitempty"`
	Status      string            `json:"status"`
	Error       string            `json:"error,omitempty"`
	Warnings    []string          `json:"warnings,omitempty"`
	Digest      string            `json:"digest,omitempty"`
	Size        int64             `json:"size_bytes,omitempty"`
	Created     time.Time         `json:"created_at"`
	Updated     time.Time         `json:"updated_at"`
	// Build names the build that last wrote the record.
	Build string `json:"build,omitempty"`
}

// Config bounds templates.
type Config struct {
	// MaxTemplates bounds the templates of one account.
	MaxTemplates int
	// MaxBytes bounds an uploaded archive and a flattened root's content.
	MaxBytes int64
	// MaxFiles bounds a flattened root's entries.
	MaxFiles int
	// Registries are the registries (host[:port]) templates may be
	// pulled from; Insecure, those of them reached over plain HTTP.
	Registries, Insecure []string
	// Transport reaches registries: its dialer is the guarded one.
	Transport http.RoundTripper
	// BuildDir holds archives and roots while they are built.
	BuildDir string
	// Builds bounds the builds this instance runs at once.
	Builds int
	Logger *slog.Logger
}

// Store keeps templates in an object store.
type Store struct {
	st    store.Store
	cfg   Config
	slots chan struct{}
	// building holds the templates this instance is building, so that two
	// uploads to one template do not interleave here.
	mu       sync.Mutex
	building map[string]bool
	bg       sync.WaitGroup
	stop     context.CancelFunc
	bgCtx    context.Context
}

// New returns the templates kept in st.
func New(st store.Store, cfg Config) *Store {
	if cfg.Builds <= 0 {
		cfg.Builds = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BuildDir == "" {
		cfg.BuildDir = os.TempDir()
	}
	// Made on first use when missing; a failure is the build's to report.
	_ = os.MkdirAll(cfg.BuildDir, 0o700)
	if cfg.Transport == nil {
		// Never the default transport: a registry is a tenant's URL.
		cfg.Registries = nil
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Store{st: st, cfg: cfg, slots: make(chan struct{}, cfg.Builds), building: map[string]bool{}, bgCtx: ctx, stop: stop}
}

// Close stops the pulls running in the background and waits for them.
func (s *Store) Close() {
	s.stop()
	s.bg.Wait()
}

// NotFound is the error of a template that is not the account's.
func NotFound(name string) error {
	if len(name) > 64 {
		name = name[:64] + "…"
	}
	return errs.New(errs.NotFound, "template %q not found", name)
}

func dir(account, name string) (string, error) {
	if !tenant.ValidUserID(account) {
		return "", errs.New(errs.Unauthenticated, "no valid account in the call")
	}
	if !ValidName(name) {
		return "", NotFound(name)
	}
	return prefix(account) + name + "/", nil
}

func prefix(account string) string { return "accounts/" + account + "/templates/" }

func rootKey(d, digest string) string {
	return d + "root-" + strings.TrimPrefix(digest, "sha256:") + ".tar"
}

// Create makes a template. With rec.Image it is pulled in the
// background; without, it is ready at once, on the executor's own root.
func (s *Store) Create(ctx context.Context, account string, rec Record) (Record, error) {
	if !ValidName(rec.Name) {
		return Record{}, errs.Invalid("name", contract.TemplateNameRule)
	}
	d, err := dir(account, rec.Name)
	if err != nil {
		return Record{}, err
	}
	if err := checkSettings(rec); err != nil {
		return Record{}, err
	}
	if rec.Image != "" {
		if err := image.CheckReference(rec.Image, s.cfg.Registries); err != nil {
			return Record{}, errs.Invalid("image", "%v", err)
		}
	}
	if _, err := s.st.Stat(ctx, d+recordName); err == nil {
		return Record{}, errs.New(errs.AlreadyExists, "template %q exists", rec.Name)
	}
	names, err := s.names(ctx, account)
	if err != nil {
		return Record{}, err
	}
	if n := len(names); n >= s.cfg.MaxTemplates {
		return Record{}, errs.NewReason(errs.ResourceExhausted, errs.ReasonQuotaExceeded, "quota templates exceeded (%d of %d)", n, s.cfg.MaxTemplates)
	}
	now := time.Now().UTC()
	rec.UserEnv, rec.UserWorkdir = rec.Env, rec.Workdir
	rec.Env, rec.Workdir, _ = merged(nil, "", rec.UserEnv, rec.UserWorkdir)
	rec.Status, rec.Created, rec.Updated = Ready, now, now
	rec.Digest, rec.Size, rec.Error, rec.Warnings = "", 0, "", nil
	if rec.Image != "" {
		rec.Status = Building
	}
	if err := s.write(ctx, d, rec); err != nil {
		return Record{}, err
	}
	if rec.Image != "" {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.pull(account, rec)
		}()
	}
	return rec, nil
}

// checkSettings checks what a user sets on a template.
func checkSettings(rec Record) error {
	for _, c := range []struct{ field, v string }{{"start_command", rec.StartCommand}, {"ready_command", rec.ReadyCommand}} {
		if len(c.v) > MaxCommandBytes || !utf8.ValidString(c.v) || strings.ContainsRune(c.v, 0) {
			return errs.Invalid(c.field, "at most %d bytes of UTF-8 without NUL", MaxCommandBytes)
		}
	}
	if err := execenv.CheckAll(rec.Env); err != nil {
		return errs.Invalid("env", "%v", err)
	}
	if w := rec.Workdir; w != "" {
		if err := checkWorkdir(w); err != nil {
			return errs.Invalid("workdir", "%v", err)
		}
	}
	return nil
}

// conchDirs are where a sandbox's own mounts are: no working directory of
// a template's.
var conchDirs = []string{"/proc", "/dev", "/sys", "/run", "/etc"}

func checkWorkdir(w string) error {
	if len(w) > MaxWorkdirBytes || !utf8.ValidString(w) || strings.ContainsRune(w, 0) {
		return fmt.Errorf("at most %d bytes of UTF-8 without NUL", MaxWorkdirBytes)
	}
	if !path.IsAbs(w) || path.Clean(w) != w || w == "/" {
		return fmt.Errorf("%q must be a clean absolute path below /", w)
	}
	for _, d := range conchDirs {
		if w == d || strings.HasPrefix(w, d+"/") {
			return fmt.Errorf("%q is below %s, which the sandbox mounts itself", w, d)
		}
	}
	return nil
}

// merged is a template's environment and working directory: the image's,
// with the user's over them. The image's variables a request could not
// set either (execenv) are left out, and said in the warnings, except
// PATH, whose directories the executor puts in front of its own.
func merged(imageEnv []string, imageWorkdir string, userEnv map[string]string, userWorkdir string) (map[string]string, string, []string) {
	env, warnings := imageVars(imageEnv)
	maps.Copy(env, userEnv)
	if len(env) == 0 {
		env = nil
	}
	w := userWorkdir
	if w == "" && checkWorkdir(imageWorkdir) == nil {
		w = imageWorkdir
	}
	return env, w, warnings
}

// imageVars are the variables of an image's environment a template keeps,
// and warnings for those it does not.
func imageVars(kvs []string) (map[string]string, []string) {
	env := map[string]string{}
	var warnings []string
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		if k == "PATH" {
			env[k] = v
			continue
		}
		if err := execenv.Check(k); err != nil || strings.ContainsRune(v, 0) {
			warnings = append(warnings, fmt.Sprintf("image variable %s left out: a command's request could not set it either", k))
			continue
		}
		env[k] = v
	}
	return env, warnings
}

// names are the names of account's templates; a listing that fails is
// an error, never a shorter list.
func (s *Store) names(ctx context.Context, account string) ([]string, error) {
	var names []string
	for info, err := range s.st.List(ctx, prefix(account), false) {
		if err != nil {
			return nil, fmt.Errorf("templates: list: %w", err)
		}
		if name := strings.TrimSuffix(strings.TrimPrefix(info.Key, prefix(account)), "/"); info.IsDir() && ValidName(name) {
			names = append(names, name)
		}
	}
	return names, nil
}

func (s *Store) write(ctx context.Context, d string, rec Record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := s.st.Put(ctx, d+recordName, strings.NewReader(string(b)), store.PutOptions{Size: int64(len(b)), Mode: 0o600, ModTime: rec.Updated}); err != nil {
		return fmt.Errorf("templates: write record: %w", err)
	}
	return nil
}

// Get returns a template.
func (s *Store) Get(ctx context.Context, account, name string) (Record, error) {
	d, err := dir(account, name)
	if err != nil {
		return Record{}, err
	}
	rc, _, err := s.st.Get(ctx, d+recordName)
	if errors.Is(err, store.ErrNotFound) {
		return Record{}, NotFound(name)
	}
	if err != nil {
		return Record{}, fmt.Errorf("templates: read record: %w", err)
	}
	defer rc.Close()
	var rec Record
	if err := json.NewDecoder(io.LimitReader(rc, 1<<20)).Decode(&rec); err != nil || rec.Name != name {
		return Record{}, fmt.Errorf("templates: record of %s is damaged", name)
	}
	if rec.Status == Building && time.Since(rec.Updated) > BuildTimeout {
		rec.Status, rec.Error = Failed, "the build did not finish (its service instance ended); create the template again or put its image again"
	}
	return rec, nil
}

// List returns account's templates by name.
func (s *Store) List(ctx context.Context, account string) ([]Record, error) {
	if !tenant.ValidUserID(account) {
		return nil, errs.New(errs.Unauthenticated, "no valid account in the call")
	}
	names, err := s.names(ctx, account)
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, name := range names {
		rec, err := s.Get(ctx, account, name)
		if errs.KindOf(err) == errs.NotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete deletes a template, record first; it reports whether there was
// one. Sandboxes running from it keep their root (executors' caches).
func (s *Store) Delete(ctx context.Context, account, name string) (bool, error) {
	d, err := dir(account, name)
	if err != nil {
		return false, err
	}
	if _, err := s.st.Stat(ctx, d+recordName); errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err := s.st.Delete(ctx, []string{d + recordName}); err != nil {
		return false, fmt.Errorf("templates: delete record: %w", err)
	}
	return true, s.removeRoots(ctx, d, "")
}

// removeRoots deletes the roots of the template in d but keep's.
func (s *Store) removeRoots(ctx context.Context, d, keep string) error {
	var keys []string
	for info, err := range s.st.List(ctx, d, false) {
		if err != nil {
			return fmt.Errorf("templates: list roots: %w", err)
		}
		if strings.HasPrefix(info.Key, d+"root-") && (keep == "" || info.Key != rootKey(d, keep)) {
			keys = append(keys, info.Key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if err := s.st.Delete(ctx, keys); err != nil {
		return fmt.Errorf("templates: delete roots: %w", err)
	}
	return nil
}

// OpenRoot opens the root of a ready template, which must be digest.
func (s *Store) OpenRoot(ctx context.Context, account, name, digest string) (io.ReadCloser, int64, error) {
	rec, err := s.Get(ctx, account, name)
	if err != nil {
		return nil, 0, err
	}
	if rec.Status != Ready || rec.Digest == "" {
		return nil, 0, errs.New(errs.FailedPrecondition, "template %q has no built image", name)
	}
	if rec.Digest != digest {
		return nil, 0, errs.New(errs.FailedPrecondition, "template %q changed: its image is now %s", name, rec.Digest)
	}
	d, _ := dir(account, name)
	rc, info, err := s.st.Get(ctx, rootKey(d, digest))
	if err != nil {
		return nil, 0, fmt.Errorf("templates: open root of %s: %w", name, err)
	}
	return rc, info.Size, nil
}

// claim marks a template as built by this instance, refusing a second
// build of it here.
func (s *Store) claim(account, name string) (func(), error) {
	k := account + "/" + name
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.building[k] {
		return nil, errs.New(errs.FailedPrecondition, "template %q is being built; wait for it to be ready or failed", name)
	}
	s.building[k] = true
	return func() {
		s.mu.Lock()
		delete(s.building, k)
		s.mu.Unlock()
	}, nil
}

// PutImage builds a template's image from an archive: r's bytes, at most
// Config.MaxBytes of them. It returns once the template is ready or
// failed; a refused image is InvalidArgument with the reason, and the
// template keeps the error.
func (s *Store) PutImage(ctx context.Context, account, name string, r io.Reader) (Record, error) {
	rec, err := s.Get(ctx, account, name)
	if err != nil {
		return Record{}, err
	}
	if rec.Status == Building {
		return Record{}, errs.New(errs.FailedPrecondition, "template %q is being built; wait for it to be ready or failed", name)
	}
	release, err := s.claim(account, name)
	if err != nil {
		return Record{}, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, BuildTimeout)
	defer cancel()
	// The archive is read whole before the template changes: a broken
	// upload leaves it as it was.
	archive, err := os.CreateTemp(s.cfg.BuildDir, "template-archive-*")
	if err != nil {
		return Record{}, fmt.Errorf("templates: spool archive: %w", err)
	}
	defer os.Remove(archive.Name())
	defer archive.Close()
	n, err := io.Copy(archive, io.LimitReader(r, s.cfg.MaxBytes+1))
	if err != nil {
		return Record{}, err
	}
	if n > s.cfg.MaxBytes {
		return Record{}, errs.NewReason(errs.ResourceExhausted, errs.ReasonRequestTooLarge, "image archive larger than the limit of %s", image.FormatBytes(s.cfg.MaxBytes))
	}
	if err := s.slot(ctx); err != nil {
		return Record{}, err
	}
	defer func() { <-s.slots }()
	rec.Image = ""
	return s.build(ctx, account, rec, func() (v1.Image, func() error, error) {
		return image.Open(ctx, archive.Name(), s.cfg.BuildDir)
	})
}

func (s *Store) slot(ctx context.Context) error {
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return errs.New(errs.Unavailable, "templates: no build slot free: %v", ctx.Err())
	}
}

// pull builds a template from its registry reference, in the background.
func (s *Store) pull(account string, rec Record) {
	ctx, cancel := context.WithTimeout(s.bgCtx, BuildTimeout)
	defer cancel()
	release, err := s.claim(account, rec.Name)
	if err != nil {
		return
	}
	defer release()
	if err := s.slot(ctx); err != nil {
		return
	}
	defer func() { <-s.slots }()
	_, err = s.build(ctx, account, rec, func() (v1.Image, func() error, error) {
		img, err := image.Pull(ctx, rec.Image, s.cfg.Registries, s.cfg.Insecure, s.cfg.Transport)
		if err != nil {
			return nil, nil, err
		}
		// Flatten reads the layers twice: the second time from disk,
		// not from the registry.
		dir, err := os.MkdirTemp(s.cfg.BuildDir, "template-layers-*")
		if err != nil {
			return nil, nil, fmt.Errorf("templates: layer cache: %w", err)
		}
		return cache.Image(img, cache.NewFilesystemCache(dir)), func() error { return os.RemoveAll(dir) }, nil
	})
	if err != nil {
		s.cfg.Logger.Info("template pull failed", "account", account, "template", rec.Name, "error", err)
	}
}

// build flattens the image open returns into the template's root and
// makes rec ready, or failed with why.
func (s *Store) build(ctx context.Context, account string, rec Record, open func() (v1.Image, func() error, error)) (Record, error) {
	d, err := dir(account, rec.Name)
	if err != nil {
		return Record{}, err
	}
	// A template deleted before or while it is built stays deleted: the
	// build marks the record it writes, and keeps nothing unless the
	// record is still its own at the end.
	if _, err := s.Get(ctx, account, rec.Name); err != nil {
		return Record{}, err
	}
	rec.Status, rec.Error, rec.Updated, rec.Build = Building, "", time.Now().UTC(), randomBuild()
	if err := s.write(ctx, d, rec); err != nil {
		return Record{}, err
	}
	built, err := s.flatten(ctx, d, open)
	if cur, gerr := s.Get(context.WithoutCancel(ctx), account, rec.Name); gerr != nil || cur.Build != rec.Build {
		// Its root goes, unless the build that won made the same one.
		if err == nil && (gerr != nil || cur.Digest != built.Digest) {
			_ = s.st.Delete(context.WithoutCancel(ctx), []string{rootKey(d, built.Digest)})
		}
		return Record{}, NotFound(rec.Name)
	}
	if err != nil {
		msg := err.Error()
		if !errors.Is(err, image.ErrRefused) && errs.KindOf(err) != errs.InvalidArgument {
			msg = "the image could not be built: " + msg
		}
		rec.Status, rec.Error, rec.Updated = Failed, msg, time.Now().UTC()
		if werr := s.write(context.WithoutCancel(ctx), d, rec); werr != nil {
			return Record{}, werr
		}
		if errors.Is(err, image.ErrRefused) {
			return rec, errs.New(errs.InvalidArgument, "%s", msg)
		}
		return rec, err
	}
	rec.Env, rec.Workdir, rec.Warnings = merged(built.Config.Env, built.Config.WorkingDir, rec.UserEnv, rec.UserWorkdir)
	rec.Status, rec.Digest, rec.Size, rec.Updated = Ready, built.Digest, built.Size, time.Now().UTC()
	if err := s.write(context.WithoutCancel(ctx), d, rec); err != nil {
		return Record{}, err
	}
	if err := s.removeRoots(context.WithoutCancel(ctx), d, rec.Digest); err != nil {
		s.cfg.Logger.Warn("template roots not removed", "template", rec.Name, "error", err)
	}
	return rec, nil
}

// flatten opens the image, flattens it into a file under BuildDir and
// stores that as the template's root.
func (s *Store) flatten(ctx context.Context, d string, open func() (v1.Image, func() error, error)) (image.Root, error) {
	img, closeImage, err := open()
	if err != nil {
		return image.Root{}, unreadable(ctx, err)
	}
	defer closeImage()
	f, err := os.CreateTemp(s.cfg.BuildDir, "template-root-*")
	if err != nil {
		return image.Root{}, fmt.Errorf("templates: root file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	root, err := image.Flatten(ctx, img, f, image.Limits{MaxBytes: s.cfg.MaxBytes, MaxFiles: s.cfg.MaxFiles})
	if err != nil {
		return image.Root{}, unreadable(ctx, err)
	}
	if ctx.Err() != nil {
		return image.Root{}, ctx.Err()
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return image.Root{}, err
	}
	hex := strings.TrimPrefix(root.Digest, "sha256:")
	if _, err := s.st.Put(ctx, rootKey(d, root.Digest), f, store.PutOptions{Size: root.Size, Mode: 0o600, ModTime: time.Now(), SHA256: hex}); err != nil {
		return image.Root{}, fmt.Errorf("templates: store root: %w", err)
	}
	return root, nil
}

// unreadable is the error of an image that could not be read: a refusal
// as it is; a broken archive or layer (bad compression, cut short) or a
// failed pull an InvalidArgument that says so, as nothing tells those
// apart from the image's own fault; the end of ctx as it is.
func unreadable(ctx context.Context, err error) error {
	if errors.Is(err, image.ErrRefused) || ctx.Err() != nil {
		return err
	}
	return errs.New(errs.InvalidArgument, "the image could not be read: %v", err)
}

// randomBuild names a build.
func randomBuild() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
