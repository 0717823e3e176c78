package faults

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/localcluster"
)

// TestMinIORestartDuringUploads restarts MinIO, killed and then stopped
// gracefully, while clients upload files: every acknowledged upload is
// kept, no part of an upload that failed is ever visible, and uploads that
// fail say why.
func TestMinIORestartDuringUploads(t *testing.T) {
	e := start(t)
	ctx := t.Context()
	const user = "carol"

	type upload struct {
		path    string
		content []byte
		r       response
		began   time.Time
	}
	var (
		mu      sync.Mutex
		uploads []upload
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	count := func(ok bool, since time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, u := range uploads {
			if u.r.ok() == ok && u.began.After(since) {
				n++
			}
		}
		return n
	}
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				content := make([]byte, 64<<10+mrand.IntN(1<<20))
				_, _ = rand.Read(content)
				u := upload{path: fmt.Sprintf("/w%d/f%04d.bin", w, i), content: content, began: time.Now()}
				u.r = e.upload(ctx, user, u.path, content)
				mu.Lock()
				uploads = append(uploads, u)
				mu.Unlock()
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	// Each fault strikes uploads in flight, and the uploads after it
	// succeed again once MinIO is back.
	faults := []struct {
		name   string
		inject func() error
	}{
		{"kill", func() error { return e.c.Kill(localcluster.KindMinIO) }},
		{"stop", func() error { return e.c.Stop(localcluster.KindMinIO) }},
	}
	for _, f := range faults {
		began := time.Now()
		eventually(t, 30*time.Second, "uploads before MinIO's "+f.name, func() error {
			if n := count(true, began); n < 3 {
				return fmt.Errorf("%d acknowledged", n)
			}
			return nil
		})
		// One upload certainly in flight: half its body is sent before
		// the fault, the rest after. Its size is announced, so the
		// workspace streams it to MinIO as it arrives.
		straddling := upload{path: "/straddling-" + f.name + ".bin", content: make([]byte, 8<<20), began: time.Now()}
		_, _ = rand.Read(straddling.content)
		pr, pw := io.Pipe()
		sent := make(chan response, 1)
		go func() { sent <- e.uploadStream(ctx, user, straddling.path, pr, int64(len(straddling.content))) }()
		half := len(straddling.content) / 2
		if _, err := pw.Write(straddling.content[:half]); err != nil {
			t.Fatalf("send the first half: %v", err)
		}
		down := time.Now()
		if err := f.inject(); err != nil {
			t.Fatal(err)
		}
		// The server may give up on the body once storage fails.
		_, _ = pw.Write(straddling.content[half:])
		_ = pw.Close()
		straddling.r = <-sent
		t.Logf("the upload straddling MinIO's %s: %v", f.name, straddling.r)
		mu.Lock()
		uploads = append(uploads, straddling)
		mu.Unlock()
		eventually(t, 30*time.Second, "uploads fail while MinIO is down", func() error {
			if n := count(false, down); n < 1 {
				return fmt.Errorf("%d failed", n)
			}
			return nil
		})
		t.Logf("MinIO %s at %v; an upload failed %v later", f.name, down.Format("15:04:05.000"), time.Since(down).Round(time.Millisecond))
		if err := e.c.Start(ctx, localcluster.KindMinIO); err != nil {
			t.Fatal(err)
		}
		up := time.Now()
		t.Logf("MinIO back after %v", up.Sub(down).Round(time.Millisecond))
		eventually(t, 60*time.Second, "uploads after MinIO's "+f.name, func() error {
			if n := count(true, up); n < 3 {
				return fmt.Errorf("%d acknowledged", n)
			}
			return nil
		})
	}
	close(stop)
	wg.Wait()
	t.Logf("faults done at %v", time.Now().Format("15:04:05.000"))

	acked, failed := 0, 0
	byPath := map[string]upload{}
	for _, u := range uploads {
		byPath[u.path] = u
		if u.r.ok() {
			acked++
			if r := e.download(ctx, user, u.path); !r.ok() || !bytes.Equal(r.body, u.content) {
				t.Errorf("acknowledged upload %s: download = %d, %d bytes (want %d): %v", u.path, r.code, len(r.body), len(u.content), r.err)
			}
			continue
		}
		failed++
		if failed == 1 {
			t.Logf("a failed upload was told: %v", u.r)
		}
		if !clearStorageError(u.r) {
			t.Errorf("upload %s failed with %v, want a 5xx answer that says the storage failed", u.path, u.r)
		}
		// A failed upload is absent, or whole if it was stored just
		// before its answer was lost; never a part of it.
		switch r := e.download(ctx, user, u.path); {
		case r.err == nil && r.code == http.StatusNotFound:
		case r.ok() && bytes.Equal(r.body, u.content):
		default:
			t.Errorf("failed upload %s is visible: download = %d, %d of %d bytes", u.path, r.code, len(r.body), len(u.content))
		}
	}
	t.Logf("%d uploads acknowledged, %d failed", acked, failed)
	// Listings show nothing but whole files.
	for w := range 3 {
		dir := fmt.Sprintf("/w%d", w)
		body := e.must("GET", "/api/v1/shell/io/list?path="+url.QueryEscape(dir), nil, "X-Shell-User-Id", user)
		var list struct {
			Entries []struct {
				Path string `json:"path"`
				Size int64  `json:"size"`
			} `json:"entries"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		for _, en := range list.Entries {
			u, ok := byPath[en.Path]
			if !ok || en.Size != int64(len(u.content)) {
				t.Errorf("%s lists %s of %d bytes, which no upload sent whole", dir, en.Path, en.Size)
			}
		}
	}
}

// clearStorageError reports a failed upload answered with a server error
// whose message says what failed, rather than a hang or a dropped
// connection.
func clearStorageError(r response) bool {
	if r.err != nil || r.code < 500 {
		return false
	}
	var st struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(r.body, &st) != nil || st.Error.Message == "" || st.Error.Message == "internal error" {
		return false
	}
	return strings.Contains(st.Error.Message, "workspace")
}
