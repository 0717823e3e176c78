// Package skills keeps the skills of each account: versioned bundles of
// files, one directory holding a SKILL.md whose front matter names and
// describes the skill (docs/reference/skills.md). A sandbox created for a
// request that names skills mounts them read-only under
// contract.SkillsDir, and the model is told their names and descriptions.
//
// A skill's record, with its versions, is one etcd key; each version's
// files are one zip archive in the object store:
//
//	conch/skills/<account>/<skill>                etcd: the skill and its versions
//	skills/<account>/<skill>/<random>             objects: a version's archive
//
// A version's archive is stored before the record that names it, so a
// record never names an archive that is not there; an archive whose record
// was never written (the write failed, or lost a race) is deleted at once,
// and one a crash left behind by Sweep.
// Deleting a version or a skill removes its record first and then its
// archives: a sandbox that mounted them keeps its copy.
package skills

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/internal/skillfs"
	"github.com/conch-sh/conch/services/internal/store"
)

const (
	// KeyPrefix is where the skills' records are in etcd.
	KeyPrefix = "conch/skills/"
	// objectsPrefix is where their archives are in the object store.
	objectsPrefix = "skills/"
	// MaxVersions bounds the versions one skill keeps.
	MaxVersions = 50
	// MaxTitleLen bounds a skill's display title.
	MaxTitleLen = 255
	// IDPrefix starts every skill's id.
	IDPrefix = "skill_"
	// Latest names a skill's newest version in a reference.
	Latest = "latest"
)

// Version is one upload of a skill.
type Version struct {
	// Version is its number, "1" for the first, as a string.
	Version string `json:"version"`
	// Dir is the top-level directory it was uploaded in.
	Dir string `json:"dir"`
	// Name and Description are its SKILL.md's front matter's.
	Name        string `json:"name"`
	Description string `json:"description"`
	// Size is its files' bytes, uncompressed; Files how many there are.
	Size  int64 `json:"size"`
	Files int   `json:"files"`
	// SHA256 is the hex SHA-256 of its archive.
	SHA256    string    `json:"sha256"`
	CreatedAt time.Time `json:"created_at"`
	// Object is the key of its archive.
	Object string `json:"object"`
}

// Skill is a skill and its versions.
type Skill struct {
	ID string `json:"id"`
	// Title is a label for people; Name, every version's name, names
	// the skill's directory in a sandbox.
	Title string `json:"title"`
	Name  string `json:"name"`
	// DefaultVersion is the version a reference without one mounts;
	// LatestVersion the newest. Both are "" once every version is
	// deleted.
	DefaultVersion string `json:"default_version"`
	LatestVersion  string `json:"latest_version"`
	// Next is the number of the next version: numbers are not reused.
	Next      int       `json:"next"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Versions are its versions, oldest first.
	Versions []Version `json:"versions"`
}

// Default is the skill's default version, nil when it has none.
func (s *Skill) Default() *Version { return s.Version(s.DefaultVersion) }

// Version returns version v of the skill, nil when it has none.
func (s *Skill) Version(v string) *Version {
	for i := range s.Versions {
		if s.Versions[i].Version == v {
			return &s.Versions[i]
		}
	}
	return nil
}

// Options configure a Store.
type Options struct {
	Etcd    *clientv3.Client
	Objects store.Store
	// Limits returns an account's quotas (quotas.Skills); nil counts
	// nothing.
	Limits func(ctx context.Context, account string) (quotas.Limits, error)
	Logger *slog.Logger
}

// Store keeps skills.
type Store struct {
	opts Options
	now  func() time.Time
}

// New returns a Store.
func New(opts Options) (*Store, error) {
	if opts.Etcd == nil || opts.Objects == nil {
		return nil, errors.New("skills: Etcd and Objects are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Store{opts: opts, now: time.Now}, nil
}

// AccountPrefix is where account's skills are in etcd, one key each.
func AccountPrefix(account string) string { return KeyPrefix + url.PathEscape(account) + "/" }

func recordKey(account, id string) string { return AccountPrefix(account) + id }

// skillObjects is where skill id's archives are: the account is escaped
// as in etcd, and a "." or ".." no object key may hold is escaped too.
func skillObjects(account, id string) string {
	a := url.PathEscape(account)
	if strings.Trim(a, ".") == "" {
		a = strings.ReplaceAll(a, ".", "%2E")
	}
	return objectsPrefix + a + "/" + id + "/"
}

// notFound is the answer for a skill the account does not have: another
// account's is not found either.
func notFound(field, id string) error {
	return &errs.Error{Kind: errs.NotFound, Field: field, Msg: fmt.Sprintf("%sskill %q not found", prefixOf(field), id)}
}

func versionNotFound(field, id, v string) error {
	return &errs.Error{Kind: errs.NotFound, Field: field, Msg: fmt.Sprintf("%sskill %q has no version %q", prefixOf(field), id, v)}
}

func prefixOf(field string) string {
	if field == "" {
		return ""
	}
	return field + ": "
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return IDPrefix + hex.EncodeToString(b)
}

// Get returns the account's skill id; field names where the id came from.
func (s *Store) Get(ctx context.Context, account, id, field string) (*Skill, error) {
	sk, _, err := s.get(ctx, account, id, field)
	return sk, err
}

func (s *Store) get(ctx context.Context, account, id, field string) (*Skill, int64, error) {
	if !skillfs.ValidID(id) {
		return nil, 0, notFound(field, id)
	}
	resp, err := s.opts.Etcd.Get(ctx, recordKey(account, id))
	if err != nil {
		return nil, 0, errs.Wrap(errs.Unavailable, err, "skills: read %s", id)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, notFound(field, id)
	}
	var sk Skill
	if err := json.Unmarshal(resp.Kvs[0].Value, &sk); err != nil {
		return nil, 0, fmt.Errorf("skills: record of %s: %w", id, err)
	}
	return &sk, resp.Kvs[0].ModRevision, nil
}

// List returns the account's skills, oldest first.
func (s *Store) List(ctx context.Context, account string) ([]*Skill, error) {
	resp, err := s.opts.Etcd.Get(ctx, AccountPrefix(account), clientv3.WithPrefix())
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "skills: list")
	}
	out := make([]*Skill, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var sk Skill
		if err := json.Unmarshal(kv.Value, &sk); err != nil {
			return nil, fmt.Errorf("skills: record %s: %w", kv.Key, err)
		}
		out = append(out, &sk)
	}
	slices.SortStableFunc(out, func(a, b *Skill) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// checkTitle refuses a title that is not one line of at most MaxTitleLen
// characters.
func checkTitle(field, title string) error {
	if utf8.RuneCountInString(title) > MaxTitleLen || strings.ContainsAny(title, "\r\n") {
		return errs.Invalid(field, "must be one line of at most %d characters", MaxTitleLen)
	}
	return nil
}

// Create stores a new skill whose first version is b; title "" takes
// the skill's name. titleField names the title's field in errors.
func (s *Store) Create(ctx context.Context, account, title, titleField string, b *Bundle) (*Skill, error) {
	if err := checkTitle(titleField, title); err != nil {
		return nil, err
	}
	if title == "" {
		title = b.Name
	}
	id := newID()
	v, err := s.putArchive(ctx, account, id, b)
	if err != nil {
		return nil, err
	}
	v.Version = "1"
	now := s.now().UTC()
	sk := &Skill{ID: id, Title: title, Name: b.Name, DefaultVersion: "1", LatestVersion: "1", Next: 2,
		CreatedAt: now, UpdatedAt: now, Versions: []Version{*v}}
	k := recordKey(account, id)
	val, _ := json.Marshal(sk)
	for {
		var held []clientv3.Cmp
		if s.opts.Limits != nil {
			limits, err := s.opts.Limits(ctx, account)
			if err != nil {
				s.dropArchive(ctx, v.Object)
				return nil, err
			}
			cmp, err := quotas.Count(ctx, s.opts.Etcd, quotas.Skills, AccountPrefix(account), limits[quotas.Skills])
			if err != nil {
				s.dropArchive(ctx, v.Object)
				return nil, err
			}
			held = append(held, cmp)
		}
		resp, err := s.opts.Etcd.Txn(ctx).
			If(append(held, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))...).
			Then(clientv3.OpPut(k, string(val))).Commit()
		if err != nil {
			s.dropArchive(ctx, v.Object)
			return nil, errs.Wrap(errs.Unavailable, err, "skills: create")
		}
		if resp.Succeeded {
			return sk, nil
		}
		// Another skill of the account was made meanwhile: count again.
	}
}

// AddVersion stores b as a new version of the account's skill id, made
// its default when makeDefault is set or the skill has none.
func (s *Store) AddVersion(ctx context.Context, account, id string, b *Bundle, makeDefault bool) (*Skill, *Version, error) {
	var stored *Version // the archive, once stored: kept across retries
	fail := func(err error) (*Skill, *Version, error) {
		if stored != nil {
			s.dropArchive(ctx, stored.Object)
		}
		return nil, nil, err
	}
	for {
		sk, rev, err := s.get(ctx, account, id, "")
		if err != nil {
			return fail(err)
		}
		if b.Name != sk.Name {
			return fail(errs.Invalid("files", "%s names the skill %q, but this skill is %q: every version keeps the first one's name", ManifestName, b.Name, sk.Name))
		}
		if len(sk.Versions) >= MaxVersions {
			return fail(errs.NewReason(errs.ResourceExhausted, errs.ReasonQuotaExceeded,
				"skill versions limit exceeded (%d of %d): delete a version of %s first", len(sk.Versions), MaxVersions, id))
		}
		if stored == nil {
			if stored, err = s.putArchive(ctx, account, id, b); err != nil {
				return nil, nil, err
			}
		}
		v := *stored
		v.Version = strconv.Itoa(sk.Next)
		sk.Versions = append(sk.Versions, v)
		sk.Next++
		sk.LatestVersion = v.Version
		if makeDefault || sk.DefaultVersion == "" {
			sk.DefaultVersion = v.Version
		}
		sk.UpdatedAt = s.now().UTC()
		ok, err := s.replace(ctx, account, sk, rev)
		if err != nil {
			return fail(err)
		}
		if ok {
			return sk, &v, nil
		}
	}
}

// putArchive stores b's archive for a version of skill id, under a key of
// its own: a version's number is decided only when its record is written.
func (s *Store) putArchive(ctx context.Context, account, id string, b *Bundle) (*Version, error) {
	z, err := b.Zip()
	if err != nil {
		return nil, fmt.Errorf("skills: archive: %w", err)
	}
	key := skillObjects(account, id) + hex.EncodeToString(randomBytes(12))
	sum := sha256Hex(z)
	if _, err := s.opts.Objects.Put(ctx, key, bytes.NewReader(z), store.PutOptions{Size: int64(len(z)), Mode: 0o644, SHA256: sum, ModTime: s.now()}); err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "skills: store the archive")
	}
	return &Version{Dir: b.Dir, Name: b.Name, Description: b.Description, Size: b.Size, Files: len(b.Files),
		SHA256: sum, CreatedAt: s.now().UTC(), Object: key}, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	return b
}

// dropArchive deletes an archive no record names; "" is none.
func (s *Store) dropArchive(ctx context.Context, key string) {
	if key == "" {
		return
	}
	if err := s.opts.Objects.Delete(context.WithoutCancel(ctx), []string{key}); err != nil {
		s.opts.Logger.WarnContext(ctx, "skills: an archive no record names was not deleted", "key", key, "error", err)
	}
}

// replace writes sk over its record if it is still at rev.
func (s *Store) replace(ctx context.Context, account string, sk *Skill, rev int64) (bool, error) {
	k := recordKey(account, sk.ID)
	val, _ := json.Marshal(sk)
	resp, err := s.opts.Etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
		Then(clientv3.OpPut(k, string(val))).Commit()
	if err != nil {
		return false, errs.Wrap(errs.Unavailable, err, "skills: update %s", sk.ID)
	}
	return resp.Succeeded, nil
}

// SetDefault makes version v the default of the account's skill id;
// field names v's field in errors.
func (s *Store) SetDefault(ctx context.Context, account, id, v, field string) (*Skill, error) {
	for {
		sk, rev, err := s.get(ctx, account, id, "")
		if err != nil {
			return nil, err
		}
		if v == Latest {
			v = sk.LatestVersion
		}
		if sk.Version(v) == nil {
			return nil, versionNotFound(field, id, v)
		}
		sk.DefaultVersion = v
		sk.UpdatedAt = s.now().UTC()
		ok, err := s.replace(ctx, account, sk, rev)
		if err != nil || ok {
			return sk, err
		}
	}
}

// Delete deletes the account's skill id and its versions' archives.
func (s *Store) Delete(ctx context.Context, account, id string) error {
	if !skillfs.ValidID(id) {
		return notFound("", id)
	}
	resp, err := s.opts.Etcd.Delete(ctx, recordKey(account, id))
	if err != nil {
		return errs.Wrap(errs.Unavailable, err, "skills: delete %s", id)
	}
	if resp.Deleted == 0 {
		return notFound("", id)
	}
	// Every archive of the skill, those of versions deleted or never
	// recorded included.
	var keys []string
	for info, err := range s.opts.Objects.List(ctx, skillObjects(account, id), true) {
		if err != nil {
			s.opts.Logger.WarnContext(ctx, "skills: the archives of a deleted skill were not listed", "skill", id, "error", err)
			break
		}
		keys = append(keys, info.Key)
	}
	if err := s.opts.Objects.Delete(context.WithoutCancel(ctx), keys); err != nil {
		s.opts.Logger.WarnContext(ctx, "skills: the archives of a deleted skill were not deleted", "skill", id, "error", err)
	}
	return nil
}

// DeleteVersion deletes version v of the account's skill id. The default
// moves to the newest version left when v was it.
func (s *Store) DeleteVersion(ctx context.Context, account, id, v string) (*Skill, error) {
	for {
		sk, rev, err := s.get(ctx, account, id, "")
		if err != nil {
			return nil, err
		}
		if v == Latest {
			v = sk.LatestVersion
		}
		i := slices.IndexFunc(sk.Versions, func(x Version) bool { return x.Version == v })
		if i < 0 {
			return nil, versionNotFound("", id, v)
		}
		gone := sk.Versions[i]
		sk.Versions = slices.Delete(sk.Versions, i, i+1)
		sk.LatestVersion = ""
		if n := len(sk.Versions); n > 0 {
			sk.LatestVersion = sk.Versions[n-1].Version
		}
		if sk.DefaultVersion == v {
			sk.DefaultVersion = sk.LatestVersion
		}
		sk.UpdatedAt = s.now().UTC()
		ok, err := s.replace(ctx, account, sk, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			s.dropArchive(ctx, gone.Object)
			return sk, nil
		}
	}
}

// Resolve finds the version a reference names: "" the default, Latest
// the newest, else its number. field names the reference in errors.
func (s *Store) Resolve(ctx context.Context, account, id, v, field string) (*Skill, *Version, error) {
	idField, versionField := "skill_id", "version"
	if field != "" {
		idField, versionField = field+".skill_id", field+".version"
	}
	sk, err := s.Get(ctx, account, id, idField)
	if err != nil {
		return nil, nil, err
	}
	want := v
	switch v {
	case "":
		want = sk.DefaultVersion
	case Latest:
		want = sk.LatestVersion
	}
	ver := sk.Version(want)
	if ver == nil {
		if want == "" {
			return nil, nil, errs.Invalid(idField, "skill %q has no versions left", id)
		}
		return nil, nil, versionNotFound(versionField, id, v)
	}
	return sk, ver, nil
}

// Archive returns a version's archive.
func (s *Store) Archive(ctx context.Context, v *Version) ([]byte, error) {
	rc, _, err := s.opts.Objects.Get(ctx, v.Object)
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "skills: read the archive of version %s", v.Version)
	}
	defer rc.Close()
	// The archive was at most MaxSkillBytes when checked; its compressed
	// size is below that plus zip's headers.
	b, err := io.ReadAll(io.LimitReader(rc, 2*contract.MaxSkillBytes))
	if err != nil {
		return nil, errs.Wrap(errs.Unavailable, err, "skills: read the archive of version %s", v.Version)
	}
	if sha256Hex(b) != v.SHA256 {
		return nil, fmt.Errorf("skills: the archive of version %s does not match its SHA-256", v.Version)
	}
	return b, nil
}
