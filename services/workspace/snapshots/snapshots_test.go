package snapshots_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/internal/store/fsstore"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
	"github.com/conch-sh/conch/services/internal/store/s3store"
	"github.com/conch-sh/conch/services/workspace/snapshots"
)

func stores(t *testing.T) map[string]func(t *testing.T) store.Store {
	m := miniotest.Start(t)
	return map[string]func(t *testing.T) store.Store{
		"fs": func(t *testing.T) store.Store {
			st, err := fsstore.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
		"minio": func(t *testing.T) store.Store {
			st, err := s3store.New(t.Context(), s3store.Options{Endpoint: m.Endpoint, AccessKey: m.AccessKey, SecretKey: m.SecretKey, Bucket: miniotest.Bucket()})
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
	}
}

func id(n byte) string { return "snap-" + strings.Repeat(hex.EncodeToString([]byte{n}), 16) }

func TestSnapshots(t *testing.T) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			s := snapshots.New(st)
			ctx := t.Context()
			data := make([]byte, 3<<20)
			_, _ = rand.Read(data)
			created := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
			rec, err := s.Put(ctx, "acme", snapshots.Record{ID: id(1), Name: "first", SandboxID: "sb-1", Created: created}, bytes.NewReader(data), 4<<20)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			if rec.Size != int64(len(data)) || rec.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("record %+v: want the archive's size and hash", rec)
			}
			if _, err := s.Put(ctx, "acme", snapshots.Record{ID: id(2), Created: created.Add(time.Hour)}, strings.NewReader("second"), 100); err != nil {
				t.Fatal(err)
			}

			got, rc, err := s.Open(ctx, "acme", id(1))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(b, data) || got != rec {
				t.Errorf("open: %+v, %d bytes, %v; want the record and the archive as put", got, len(b), err)
			}
			list, err := s.List(ctx, "acme")
			if err != nil || len(list) != 2 || list[0].ID != id(2) || list[1].ID != id(1) {
				t.Errorf("list = %+v, %v; want both, newest first", list, err)
			}
			if list, err := s.List(ctx, "other"); err != nil || len(list) != 0 {
				t.Errorf("another account's list = %+v, %v", list, err)
			}
			if _, err := s.Get(ctx, "other", id(1)); errs.KindOf(err) != errs.NotFound {
				t.Errorf("another account's get: %v, want not found", err)
			}

			for _, tc := range []struct {
				name string
				rec  snapshots.Record
				body string
				max  int64
				kind errs.Kind
			}{
				{"too large", snapshots.Record{ID: id(3)}, "0123456789", 9, errs.ResourceExhausted},
				{"bad id", snapshots.Record{ID: "snap-../../x"}, "", 10, errs.InvalidArgument},
				{"long name", snapshots.Record{ID: id(4), Name: strings.Repeat("n", snapshots.MaxNameChars+1)}, "", 10, errs.InvalidArgument},
				{"taken id", snapshots.Record{ID: id(1)}, "", 10, errs.AlreadyExists},
			} {
				if _, err := s.Put(ctx, "acme", tc.rec, strings.NewReader(tc.body), tc.max); errs.KindOf(err) != tc.kind {
					t.Errorf("%s: %v, want %v", tc.name, err, tc.kind)
				}
			}
			// A failing archive keeps nothing.
			if _, err := s.Put(ctx, "acme", snapshots.Record{ID: id(5)}, io.MultiReader(strings.NewReader("part"), failing{}), 100); err == nil {
				t.Error("a failing archive was stored")
			}
			for _, n := range []byte{3, 5} {
				if _, err := s.Get(ctx, "acme", id(n)); errs.KindOf(err) != errs.NotFound {
					t.Errorf("refused snapshot %s: %v, want not found", id(n), err)
				}
			}

			if ok, err := s.Delete(ctx, "acme", id(1)); !ok || err != nil {
				t.Fatalf("delete: %v %v", ok, err)
			}
			if ok, err := s.Delete(ctx, "acme", id(1)); ok || err != nil {
				t.Errorf("second delete: %v %v, want false", ok, err)
			}
			if _, _, err := s.Open(ctx, "acme", id(1)); errs.KindOf(err) != errs.NotFound {
				t.Errorf("open after delete: %v", err)
			}
			for info, err := range st.List(ctx, "accounts/acme/snapshots/"+id(1)+"/", true) {
				t.Errorf("left after delete: %v %v", info.Key, err)
			}
		})
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("tar failed") }
