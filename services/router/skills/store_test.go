package skills

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/quotas"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
	"github.com/conch-sh/conch/services/internal/store/s3store"
	"github.com/conch-sh/conch/services/router/completion"
)

// backends are the object stores a Store runs on: the dev directory and
// MinIO.
var backends = map[string]func(t *testing.T) store.Store{
	"fs": func(t *testing.T) store.Store {
		st, err := fsstore.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return st
	},
	"minio": func(t *testing.T) store.Store {
		m := miniotest.Start(t)
		st, err := s3store.New(t.Context(), s3store.Options{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: miniotest.Bucket()})
		if err != nil {
			t.Fatal(err)
		}
		return st
	},
}

func newStore(t *testing.T, skillsQuota int64) (*Store, store.Store) {
	t.Helper()
	return newStoreOn(t, backends["fs"](t), skillsQuota)
}

func newStoreOn(t *testing.T, objects store.Store, skillsQuota int64) (*Store, store.Store) {
	t.Helper()
	limits := quotas.Defaults.Limits()
	limits[quotas.Skills] = skillsQuota
	s, err := New(Options{Etcd: etcdxtest.StartForTest(t), Objects: objects,
		Limits: func(context.Context, string) (quotas.Limits, error) { return limits, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return s, objects
}

func bundle(t *testing.T, name, desc string) *Bundle {
	t.Helper()
	u := newUpload("files")
	_ = u.add("dir/SKILL.md", 0o644, strings.NewReader("---\nname: "+name+"\ndescription: "+desc+"\n---\nbody\n"))
	_ = u.add("dir/tool.sh", 0o755, strings.NewReader("echo hi"))
	b, err := u.bundle()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func countObjects(t *testing.T, objects store.Store) int {
	n := 0
	for _, err := range objects.List(t.Context(), "", true) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

func TestStoreRoundTrip(t *testing.T) {
	for name, backend := range backends {
		t.Run(name, func(t *testing.T) { testRoundTrip(t, backend(t)) })
	}
}

func testRoundTrip(t *testing.T, objects store.Store) {
	s, _ := newStoreOn(t, objects, 2)
	ctx := t.Context()
	sk, err := s.Create(ctx, "acct", "", "display_name", bundle(t, "pdf", "v1"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sk.ID, IDPrefix) || sk.Title != "pdf" || sk.DefaultVersion != "1" || sk.LatestVersion != "1" {
		t.Fatalf("created %+v", sk)
	}
	// Another account finds nothing.
	if _, err := s.Get(ctx, "other", sk.ID, "skill_id"); errs.KindOf(err) != errs.NotFound || errs.Public(err).Param != "skill_id" {
		t.Fatalf("other account: %v", err)
	}
	if _, _, err := s.AddVersion(ctx, "acct", sk.ID, bundle(t, "other-name", "x"), false); errs.KindOf(err) != errs.InvalidArgument {
		t.Fatalf("renamed version: %v", err)
	}
	sk, v, err := s.AddVersion(ctx, "acct", sk.ID, bundle(t, "pdf", "v2"), false)
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != "2" || sk.DefaultVersion != "1" || sk.LatestVersion != "2" {
		t.Fatalf("after a version: %+v %+v", sk, v)
	}
	for _, tt := range []struct{ ref, want string }{{"", "v1"}, {Latest, "v2"}, {"2", "v2"}} {
		_, got, err := s.Resolve(ctx, "acct", sk.ID, tt.ref, "container.skills[0]")
		if err != nil || got.Description != tt.want {
			t.Fatalf("resolve %q: %+v, %v", tt.ref, got, err)
		}
		z, err := s.Archive(ctx, got)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := FromZip("files", z); err != nil || b.Description != tt.want {
			t.Fatalf("archive of %q: %+v, %v", tt.ref, b, err)
		}
	}
	if _, _, err := s.Resolve(ctx, "acct", sk.ID, "9", "skills[0]"); errs.KindOf(err) != errs.NotFound || errs.Public(err).Param != "skills[0].version" {
		t.Fatalf("missing version: %v", err)
	}
	if sk, err = s.SetDefault(ctx, "acct", sk.ID, "2", "default_version"); err != nil || sk.DefaultVersion != "2" {
		t.Fatalf("set default: %+v %v", sk, err)
	}
	// The quota counts skills, and names itself.
	if _, err := s.Create(ctx, "acct", "", "display_name", bundle(t, "b", "x")); err != nil {
		t.Fatal(err)
	}
	_, err = s.Create(ctx, "acct", "", "display_name", bundle(t, "c", "x"))
	if a := errs.Public(err); a.Status != 429 || !strings.Contains(a.Message, "quota skills exceeded (2 of 2)") {
		t.Fatalf("beyond the quota: %+v", a)
	}
	if list, err := s.List(ctx, "acct"); err != nil || len(list) != 2 || list[0].ID != sk.ID {
		t.Fatalf("list: %v %v", list, err)
	}
	if n := countObjects(t, objects); n != 3 {
		t.Fatalf("%d archives, want 3 (none left of the refused create)", n)
	}
	// Deleting the default version moves the default to the newest left.
	if sk, err = s.DeleteVersion(ctx, "acct", sk.ID, "2"); err != nil || sk.DefaultVersion != "1" || sk.LatestVersion != "1" {
		t.Fatalf("delete version: %+v %v", sk, err)
	}
	if n := countObjects(t, objects); n != 2 {
		t.Fatalf("%d archives after deleting a version, want 2", n)
	}
	if err := s.Delete(ctx, "other", sk.ID); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("delete from another account: %v", err)
	}
	if err := s.Delete(ctx, "acct", sk.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "acct", sk.ID, ""); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("deleted skill: %v", err)
	}
	if n := countObjects(t, objects); n != 1 {
		t.Fatalf("%d archives after deleting the skill, want 1", n)
	}
}

func TestVersionLimit(t *testing.T) {
	s, _ := newStore(t, 10)
	ctx := t.Context()
	sk, err := s.Create(ctx, "acct", "", "display_name", bundle(t, "pdf", "v"))
	if err != nil {
		t.Fatal(err)
	}
	for range MaxVersions - 1 {
		if _, _, err := s.AddVersion(ctx, "acct", sk.ID, bundle(t, "pdf", "v"), true); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = s.AddVersion(ctx, "acct", sk.ID, bundle(t, "pdf", "v"), true)
	if a := errs.Public(err); a.Status != 429 || !strings.Contains(a.Message, "versions limit exceeded (50 of 50)") {
		t.Fatalf("beyond the versions: %+v", a)
	}
}

func TestMount(t *testing.T) {
	s, _ := newStore(t, 10)
	ctx := t.Context()
	a, err := s.Create(ctx, "acct", "", "display_name", bundle(t, "pdf", "Fill PDFs."))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, "acct", "", "display_name", bundle(t, "pdf", "Another."))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Mount(ctx, "acct", []completion.SkillRef{{ID: a.ID, Version: Latest, Field: "container.skills[0]"}})
	if err != nil || len(got) != 1 || got[0].Name != "pdf" || got[0].Description != "Fill PDFs." || len(got[0].Bundle.GetFiles()) != 2 {
		t.Fatalf("mount: %+v %v", got, err)
	}
	if f := got[0].Bundle.GetFiles()[1]; f.GetPath() != "tool.sh" || f.GetMode() != 0o755 || string(f.GetContent()) != "echo hi" {
		t.Fatalf("file: %v", f)
	}
	for _, tt := range []struct {
		name  string
		acct  string
		refs  []completion.SkillRef
		param string
		code  int
	}{
		{"unknown", "acct", []completion.SkillRef{{ID: "skill_nope", Field: "skills[0]"}}, "skills[0].skill_id", 404},
		{"another account's", "other", []completion.SkillRef{{ID: a.ID, Field: "skills[0]"}}, "skills[0].skill_id", 404},
		{"not an id", "acct", []completion.SkillRef{{ID: "../x", Field: "skills[0]"}}, "skills[0].skill_id", 404},
		{"no version", "acct", []completion.SkillRef{{ID: a.ID, Version: "3", Field: "skills[0]"}}, "skills[0].version", 404},
		{"one name twice", "acct", []completion.SkillRef{{ID: a.ID, Field: "skills[0]"}, {ID: b.ID, Field: "skills[1]"}}, "skills[1].skill_id", 400},
	} {
		_, err := s.Mount(ctx, tt.acct, tt.refs)
		if a := errs.Public(err); a.Param != tt.param || a.Status != tt.code {
			t.Errorf("%s: %+v, want %d naming %s", tt.name, a, tt.code, tt.param)
		}
	}
}

// TestSweep removes the archives no record names once they are old
// enough, and keeps every recorded one.
func TestSweep(t *testing.T) {
	s, objects := newStore(t, 10)
	ctx := t.Context()
	sk, err := s.Create(ctx, "acct", "", "display_name", bundle(t, "pdf", "v"))
	if err != nil {
		t.Fatal(err)
	}
	// What a crash between storing an archive and its record leaves.
	if _, err := s.putArchive(ctx, "acct", sk.ID, bundle(t, "pdf", "v")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.putArchive(ctx, "acct", "skill_neverrecorded", bundle(t, "pdf", "v")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("young archives: swept %d, %v", n, err)
	}
	s.now = func() time.Time { return time.Now().Add(2 * sweepGrace) }
	if n, err := s.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("old archives: swept %d, %v", n, err)
	}
	if n := countObjects(t, objects); n != 1 {
		t.Fatalf("%d archives left, want the recorded one", n)
	}
	if _, v, err := s.Resolve(ctx, "acct", sk.ID, "", ""); err != nil {
		t.Fatal(err)
	} else if _, err := s.Archive(ctx, v); err != nil {
		t.Fatal(err)
	}
}
