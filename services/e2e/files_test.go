package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/store/miniotest"
)

// fileClient calls the Shell file API of a running conch as one user.
type fileClient struct {
	t    testing.TB
	d    *dev
	key  string
	user string
}

func (c *fileClient) call(method, path string, body any, headers ...string) (int, []byte) {
	c.t.Helper()
	return c.d.call(method, path, c.key, body, append([]string{"X-Shell-User-Id", c.user}, headers...)...)
}

// upload PUTs body to path and returns status and answer.
func (c *fileClient) upload(p string, body io.Reader, size int64) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), "PUT", c.d.URL+"/api/v1/shell/io/upload?path="+url.QueryEscape(p), body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("X-Shell-User-Id", c.user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c *fileClient) download(p string) (*http.Response, []byte) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), "GET", c.d.URL+"/api/v1/shell/io/download?path="+url.QueryEscape(p), nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("X-Shell-User-Id", c.user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, b
}

type entry struct {
	Name, Path, Type string
}

func (c *fileClient) list(p string) []string {
	c.t.Helper()
	code, body := c.call("GET", "/api/v1/shell/io/list?path="+url.QueryEscape(p), nil)
	if code != http.StatusOK {
		c.t.Fatalf("list %s = %d %s", p, code, body)
	}
	var out struct{ Entries []entry }
	if err := json.Unmarshal(body, &out); err != nil {
		c.t.Fatal(err)
	}
	var names []string
	for _, e := range out.Entries {
		names = append(names, e.Name+map[string]string{"dir": "/"}[e.Type])
	}
	return names
}

// newAccount creates an account and returns an API key of it.
func newAccount(t *testing.T, d *dev, name string) string {
	t.Helper()
	code, body := d.call("POST", "/api/v1/accounts", d.Key, map[string]string{"name": name})
	if code != http.StatusOK {
		t.Fatalf("create account = %d %s", code, body)
	}
	var acct struct{ ID string }
	_ = json.Unmarshal(body, &acct)
	code, body = d.call("POST", "/api/v1/accounts/"+acct.ID+"/keys", d.Key, map[string]string{})
	if code != http.StatusOK {
		t.Fatalf("create key = %d %s", code, body)
	}
	var key struct{ Key string }
	_ = json.Unmarshal(body, &key)
	return key.Key
}

const limit = 100 << 20

// TestFiles checks the Shell file API end to end on conch dev, on local disk
// and on MinIO: the calls of docs/how-to/workspace-files.md, upload limits,
// signed URLs, tenant isolation and traversal.
func TestFiles(t *testing.T) {
	t.Run("local disk", func(t *testing.T) {
		d := startDev(t)
		testFiles(t, d, func(t *testing.T) []string {
			entries, err := os.ReadDir(filepath.Join(d.DataDir, "workspaces", "tmp"))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			return names
		})
	})
	t.Run("minio", func(t *testing.T) {
		m := miniotest.Start(t)
		bucket := miniotest.Bucket()
		raw, err := minio.New(m.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
		if err != nil {
			t.Fatal(err)
		}
		d := startDev(t, "CONCH_S3_ENDPOINT=http://"+m.Endpoint, "CONCH_S3_ACCESS_KEY="+m.AccessKey, "CONCH_S3_SECRET_KEY="+m.SecretKey, "CONCH_S3_BUCKET="+bucket)
		testFiles(t, d, func(t *testing.T) []string {
			// Large content is staged as blobs, and a multipart one marked
			// beside its blob, all under .blobs/.
			var keys []string
			for oi := range raw.ListObjectsIter(t.Context(), bucket, minio.ListObjectsOptions{Prefix: ".blobs/", Recursive: true}) {
				if oi.Err != nil {
					t.Fatal(oi.Err)
				}
				keys = append(keys, oi.Key)
			}
			return keys
		})
	})
}

// testFiles runs the file API checks on d; staged lists the upload data
// its store holds outside any published file.
func testFiles(t *testing.T, d *dev, staged func(t *testing.T) []string) {
	alice := &fileClient{t: t, d: d, key: d.Key, user: "alice"}

	t.Run("round trip", func(t *testing.T) {
		alice.t = t
		if code, body := alice.upload("/notes/a.txt", strings.NewReader("hello"), -1); code != http.StatusOK || !strings.Contains(string(body), `"path":"/notes/a.txt"`) || !strings.Contains(string(body), `"type":"file"`) {
			t.Fatalf("upload = %d %s", code, body)
		}
		resp, body := alice.download("/notes/a.txt")
		if resp.StatusCode != http.StatusOK || string(body) != "hello" {
			t.Fatalf("download = %d %q", resp.StatusCode, body)
		}
		for k, want := range map[string]string{"Content-Disposition": `attachment; filename=a.txt`, "X-Content-Type-Options": "nosniff", "Content-Type": "application/octet-stream", "Content-Length": "5"} {
			if got := resp.Header.Get(k); got != want {
				t.Errorf("download %s = %q, want %q", k, got, want)
			}
		}
		// Many stream messages, each of other bytes, the last a short
		// one: the receiving end of an upload or a download receives
		// every message into the buffer of the one before.
		big := make([]byte, 4*chunks.Size+7)
		_, _ = rand.Read(big)
		if code, body := alice.upload("/notes/big.bin", bytes.NewReader(big), -1); code != http.StatusOK {
			t.Fatalf("upload of %d bytes = %d %s", len(big), code, body)
		}
		if resp, body := alice.download("/notes/big.bin"); resp.StatusCode != http.StatusOK || !bytes.Equal(body, big) {
			t.Fatalf("download of %d bytes = %d, %d bytes, equal %v", len(big), resp.StatusCode, len(body), bytes.Equal(body, big))
		}
		if code, body := alice.call("POST", "/api/v1/shell/io/mkdir", map[string]string{"path": "/empty/dir"}); code != http.StatusOK || !strings.Contains(string(body), `"type":"dir"`) {
			t.Fatalf("mkdir = %d %s", code, body)
		}
		if got := alice.list("/"); strings.Join(got, ",") != "empty/,notes/" {
			t.Fatalf("list / = %v", got)
		}
		code, body := alice.call("GET", "/api/v1/shell/io/stat?path=/notes/a.txt", nil)
		if code != http.StatusOK || !strings.Contains(string(body), `"size":"5"`) && !strings.Contains(string(body), `"size":5`) {
			t.Fatalf("stat = %d %s", code, body)
		}
		for _, p := range []string{"/missing", "/notes/missing.txt", "/empty/dir/x"} {
			if code, body := alice.call("GET", "/api/v1/shell/io/stat?path="+p, nil); code != http.StatusNotFound {
				t.Errorf("stat %s = %d %s, want 404", p, code, body)
			}
			if code, body := alice.call("GET", "/api/v1/shell/io/list?path="+p, nil); code != http.StatusNotFound {
				t.Errorf("list %s = %d %s, want 404", p, code, body)
			}
			if resp, body := alice.download(p); resp.StatusCode != http.StatusNotFound {
				t.Errorf("download %s = %d %s, want 404", p, resp.StatusCode, body)
			}
		}
		if code, body := alice.call("DELETE", "/api/v1/shell/io/delete?path=/notes", nil); code != http.StatusBadRequest {
			t.Errorf("non-recursive delete of a full dir = %d %s, want 400", code, body)
		}
		if code, body := alice.call("DELETE", "/api/v1/shell/io/delete?path=/", nil); code != http.StatusBadRequest {
			t.Errorf("delete / without recursive = %d %s, want 400", code, body)
		}
		if code, body := alice.call("DELETE", "/api/v1/shell/io/delete?path=/notes&recursive=true", nil); code != http.StatusOK || !strings.Contains(string(body), `"deleted"`) {
			t.Errorf("recursive delete = %d %s", code, body)
		}
		if got := alice.list("/"); strings.Join(got, ",") != "empty/" {
			t.Fatalf("list / after delete = %v", got)
		}
	})

	t.Run("traversal in every spelling is 400", func(t *testing.T) {
		alice.t = t
		bob := &fileClient{t: t, d: d, key: d.Key, user: "bob"}
		if code, body := bob.upload("/secret.txt", strings.NewReader("bob's"), -1); code != http.StatusOK {
			t.Fatalf("bob upload = %d %s", code, body)
		}
		spellings := []string{
			"..", "../bob/secret.txt", "/../bob/secret.txt", "/../../../../etc/passwd", "/a/../../bob",
			"%2e%2e/bob", "/%2e%2e/bob/secret.txt", "/%252e%252e/bob", "/..%2fbob", "/..%5cbob", "/..\\bob",
			"", "bob/secret.txt", "/a\x00b", "/\u2024\u2024/bob", "/\uff0e\uff0e/bob", "/a\u2215..", "/" + strings.Repeat("x", 300),
			"/.. ", "/ . ", "/line\nfeed", "/" + strings.Repeat("d/", 2100),
		}
		for _, p := range spellings {
			q := url.QueryEscape(p)
			for _, c := range []struct{ method, path string }{
				{"GET", "/api/v1/shell/io/list?path=" + q},
				{"GET", "/api/v1/shell/io/stat?path=" + q},
				{"GET", "/api/v1/shell/io/download?path=" + q},
				{"DELETE", "/api/v1/shell/io/delete?recursive=true&path=" + q},
			} {
				if code, body := alice.call(c.method, c.path, nil); code != http.StatusBadRequest {
					t.Errorf("%s %q = %d %s, want 400", c.method, p, code, tail(string(body), 200))
				}
			}
			if code, body := alice.upload(p, strings.NewReader("x"), -1); code != http.StatusBadRequest {
				t.Errorf("upload %q = %d %s, want 400", p, code, tail(string(body), 200))
			}
			for _, c := range []string{"/api/v1/shell/io/mkdir", "/api/v1/shell/io/public-url"} {
				if code, body := alice.call("POST", c, map[string]any{"path": p}); code != http.StatusBadRequest {
					t.Errorf("POST %s %q = %d %s, want 400", c, p, code, tail(string(body), 200))
				}
			}
		}
		// Raw, unescaped spellings in the query string.
		for _, raw := range []string{"..%2f..%2fbob", "%2e%2e%2fbob", "/%2E%2E/bob", "%c0%ae%c0%ae/bob", "/..;/bob", "/.%00./bob"} {
			if code, body := alice.call("GET", "/api/v1/shell/io/stat?path="+raw, nil); code != http.StatusBadRequest {
				t.Errorf("raw %q = %d %s, want 400", raw, code, tail(string(body), 200))
			}
		}
		if code, body := alice.call("GET", "/api/v1/shell/io/stat?path=/secret.txt", nil); code != http.StatusNotFound {
			t.Errorf("alice sees bob's file: %d %s", code, body)
		}
		if resp, body := bob.download("/secret.txt"); resp.StatusCode != http.StatusOK || string(body) != "bob's" {
			t.Errorf("bob's file = %d %q", resp.StatusCode, body)
		}
	})

	t.Run("tenant confusion", func(t *testing.T) {
		alice.t = t
		if code, body := alice.upload("/mine", strings.NewReader("alice"), -1); code != http.StatusOK {
			t.Fatalf("upload = %d %s", code, body)
		}
		bad := []string{"", "alice/../bob", "../bob", "alice/x", "alice%2fbob", "alice bob", ".", "..", strings.Repeat("a", 129), "alice\\bob", "alïce"}
		for _, u := range bad {
			if code, body := d.call("GET", "/api/v1/shell/io/list?path=/", d.Key, nil, "X-Shell-User-Id", u); code != http.StatusBadRequest {
				t.Errorf("user %q = %d %s, want 400", u, code, body)
			}
		}
		if code, body := d.call("GET", "/api/v1/shell/io/list?path=/", d.Key, nil); code != http.StatusBadRequest || !strings.Contains(string(body), "X-Shell-User-Id") {
			t.Errorf("no user = %d %s, want 400 naming the header", code, body)
		}
		if code, body := d.call("GET", "/api/v1/shell/io/list?path=/", d.Key, nil, "X-Shell-User-Id", "alice", "X-Shell-User-Id", "bob"); code != http.StatusBadRequest {
			t.Errorf("two users = %d %s, want 400", code, body)
		}
		// Prefixes and extensions of an id are other users.
		for _, u := range []string{"alic", "alice2", "alice.", "Alice", "alice@x"} {
			other := &fileClient{t: t, d: d, key: d.Key, user: u}
			if code, body := other.call("GET", "/api/v1/shell/io/stat?path=/mine", nil); code != http.StatusNotFound {
				t.Errorf("user %q sees alice's file: %d %s", u, code, body)
			}
		}
		// Headers smuggled through grpc-gateway's metadata prefixes.
		smuggled := [][]string{
			{"X-Shell-User-Id", "eve", "Grpc-Metadata-X-Shell-User-Id", "alice"},
			{"X-Shell-User-Id", "eve", "Grpc-Metadata-Conch-Account", "other", "Grpc-Metadata-Conch-Signature", "x"},
			{"X-Shell-User-Id", "eve", "Grpc-Metadata-X-Shell-User-Id-Bin", "YWxpY2U="},
			{"X-Shell-User-Id", "eve", "Conch-Account", "dev", "Conch-Admin", "true"},
		}
		for _, h := range smuggled {
			code, body := d.call("GET", "/api/v1/shell/io/stat?path=/mine", d.Key, nil, h...)
			if code != http.StatusNotFound {
				t.Errorf("smuggled %v = %d %s, want eve's 404", h[2:], code, body)
			}
		}
	})

	t.Run("another account's key", func(t *testing.T) {
		alice.t = t
		other := &fileClient{t: t, d: d, key: newAccount(t, d, "Other"), user: "alice"}
		if code, body := other.call("GET", "/api/v1/shell/io/stat?path=/mine", nil); code != http.StatusNotFound {
			t.Fatalf("other account sees alice's file: %d %s", code, body)
		}
		if resp, _ := other.download("/mine"); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("other account downloads alice's file: %d", resp.StatusCode)
		}
		if code, body := other.upload("/mine", strings.NewReader("other"), -1); code != http.StatusOK {
			t.Fatalf("other upload = %d %s", code, body)
		}
		if code, body := other.call("DELETE", "/api/v1/shell/io/delete?path=/&recursive=true", nil); code != http.StatusOK {
			t.Fatalf("other delete / = %d %s", code, body)
		}
		if resp, body := alice.download("/mine"); resp.StatusCode != http.StatusOK || string(body) != "alice" {
			t.Fatalf("alice's file after the other account emptied its own = %d %q", resp.StatusCode, body)
		}
		if code, body := other.call("GET", "/api/v1/shell/io/list?path=/", nil); code != http.StatusOK || !strings.Contains(string(body), `"entries":[]`) {
			t.Fatalf("other's list after delete / = %d %s", code, body)
		}
	})

	t.Run("upload limits", func(t *testing.T) {
		alice.t = t
		tests := []struct {
			name string
			body io.Reader
			size int64
			want int
		}{
			{"chunked limit+1", io.LimitReader(zeros{}, limit+1), -1, http.StatusRequestEntityTooLarge},
			{"Content-Length of limit, chunk of limit+1 is cut at the limit", io.LimitReader(zeros{}, limit), limit, http.StatusOK},
			{"chunked limit", io.LimitReader(zeros{}, limit), -1, http.StatusOK},
		}
		for i, tt := range tests {
			p := fmt.Sprintf("/up/%d", i)
			code, body := alice.upload(p, tt.body, tt.size)
			if code != tt.want {
				t.Errorf("%s: upload = %d %s, want %d", tt.name, code, tail(string(body), 300), tt.want)
			}
			wantStat := http.StatusNotFound
			if tt.want == http.StatusOK {
				wantStat = http.StatusOK
			}
			if code, body := alice.call("GET", "/api/v1/shell/io/stat?path="+p, nil); code != wantStat {
				t.Errorf("%s: stat after upload = %d %s, want %d", tt.name, code, body, wantStat)
			}
		}
		// Lying Content-Length, both ways: nothing is stored.
		for _, tt := range []struct {
			name, length, body string
			want               int
		}{
			{"announces limit+1, sends little", fmt.Sprint(limit + 1), "tiny", http.StatusRequestEntityTooLarge},
			{"announces 10 GB", "10000000000", "tiny", http.StatusRequestEntityTooLarge},
			{"announces more than it sends", "1000", "only this", 0},
		} {
			p := "/up/" + strings.ReplaceAll(tt.name, " ", "-")
			conn, err := net.Dial("tcp", strings.TrimPrefix(d.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(conn, "PUT /api/v1/shell/io/upload?path=%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Shell-User-Id: alice\r\nContent-Length: %s\r\n\r\n%s", p, d.Key, tt.length, tt.body)
			if tcp, ok := conn.(*net.TCPConn); ok {
				_ = tcp.CloseWrite()
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			code := 0
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			conn.Close()
			if tt.want != 0 && code != tt.want {
				t.Errorf("%s: status %d (%v), want %d", tt.name, code, err, tt.want)
			}
			if code == http.StatusOK {
				t.Errorf("%s: upload accepted", tt.name)
			}
			if code, body := alice.call("GET", "/api/v1/shell/io/stat?path="+p, nil); code != http.StatusNotFound {
				t.Errorf("%s: stored: %d %s", tt.name, code, body)
			}
		}
		// A chunked body cut before its last chunk: nothing is stored.
		conn, err := net.Dial("tcp", strings.TrimPrefix(d.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "PUT /api/v1/shell/io/upload?path=/up/cut HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Shell-User-Id: alice\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", d.Key)
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("cut chunked body accepted")
			}
		}
		conn.Close()
		if code, body := alice.call("GET", "/api/v1/shell/io/stat?path=/up/cut", nil); code != http.StatusNotFound {
			t.Errorf("cut chunked body stored: %d %s", code, body)
		}
		if code, body := alice.call("DELETE", "/api/v1/shell/io/delete?path=/up&recursive=true", nil); code != http.StatusOK {
			t.Errorf("cleanup = %d %s", code, body)
		}
		// Refused uploads leave no data behind: a 413 of 100 MiB kept
		// would fill the disk when repeated. The service drops a failed
		// upload's data as it answers, which may be just after the
		// router has. The accepted uploads are deleted above, so whatever
		// remains is a refused one's.
		deadline := time.Now().Add(10 * time.Second)
		for left := staged(t); len(left) > 0; left = staged(t) {
			if time.Now().After(deadline) {
				t.Fatalf("staged upload data left after refused uploads: %v", left)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("signed public URLs", func(t *testing.T) {
		alice.t = t
		if code, body := alice.upload("/share/page.html", strings.NewReader("<script>alert(1)</script>"), -1); code != http.StatusOK {
			t.Fatalf("upload = %d %s", code, body)
		}
		code, body := alice.call("POST", "/api/v1/shell/io/public-url", map[string]any{"path": "/share/page.html", "expires_in_seconds": 600})
		if code != http.StatusOK {
			t.Fatalf("public-url = %d %s", code, body)
		}
		var pu struct {
			URL       string `json:"url"`
			ExpiresAt string `json:"expires_at"`
		}
		if err := json.Unmarshal(body, &pu); err != nil || !strings.HasPrefix(pu.URL, d.URL+"/public/v1/files/") {
			t.Fatalf("public-url body %s", body)
		}
		if exp, err := time.Parse(time.RFC3339, pu.ExpiresAt); err != nil || time.Until(exp) > 601*time.Second || time.Until(exp) < 500*time.Second {
			t.Fatalf("expires_at = %q", pu.ExpiresAt)
		}
		get := func(method, u string) (int, http.Header, string) {
			req, err := http.NewRequestWithContext(t.Context(), method, u, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header, string(b)
		}
		code, h, content := get("GET", pu.URL)
		if code != http.StatusOK || content != "<script>alert(1)</script>" {
			t.Fatalf("GET public URL = %d %q", code, content)
		}
		if !strings.HasPrefix(h.Get("Content-Disposition"), "attachment") || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("public URL served as a page: %v", h)
		}
		token := strings.TrimPrefix(pu.URL, d.URL+"/public/v1/files/")
		flip := func(i int) string {
			b := []byte(token)
			if b[i] == 'A' {
				b[i] = 'B'
			} else {
				b[i] = 'A'
			}
			return string(b)
		}
		changed := []string{
			pu.URL + "?x=1", pu.URL + "?", pu.URL + "/", pu.URL + "x", pu.URL[:len(pu.URL)-1],
			d.URL + "/public/v1/files/" + flip(len(token)/2), d.URL + "/public/v1/files/" + flip(len(token)-3), d.URL + "/public/v1/files/" + flip(5),
			d.URL + "/public/v1/files/" + strings.Replace(token, ".", "%2E", 1), d.URL + "/public/v1/files/",
		}
		for _, u := range changed {
			if code, _, body := get("GET", u); code != http.StatusForbidden {
				t.Errorf("changed URL %s = %d %s, want 403", u, code, tail(body, 200))
			}
		}
		for _, m := range []string{"POST", "PUT", "DELETE", "PATCH", "HEAD"} {
			if code, _, _ := get(m, pu.URL); code == http.StatusOK || code < 400 {
				t.Errorf("%s public URL = %d, want a refusal", m, code)
			}
		}
		for _, tt := range []struct {
			body map[string]any
			want int
		}{
			{map[string]any{"path": "/share/page.html", "expires_in_seconds": 604801}, 400},
			{map[string]any{"path": "/share/page.html", "expires_in_seconds": -1}, 400},
			{map[string]any{"path": "/share/page.html", "expires_in_seconds": 604800}, 200},
			{map[string]any{"path": "/share/page.html"}, 200},
			{map[string]any{"path": "/share"}, 400},
			{map[string]any{"path": "/share/missing"}, 404},
		} {
			if code, body := alice.call("POST", "/api/v1/shell/io/public-url", tt.body); code != tt.want {
				t.Errorf("public-url %v = %d %s, want %d", tt.body, code, body, tt.want)
			}
		}
		// Expiry: a one-second URL stops working.
		_, body = alice.call("POST", "/api/v1/shell/io/public-url", map[string]any{"path": "/share/page.html", "expires_in_seconds": 1})
		var short struct{ URL string }
		_ = json.Unmarshal(body, &short)
		deadline := time.Now().Add(5 * time.Second)
		for {
			code, _, _ := get("GET", short.URL)
			if code == http.StatusForbidden {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("expired URL still answers %d", code)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The link is for that content: a replaced file is not served.
		if code, body := alice.upload("/share/page.html", strings.NewReader("new secret content"), -1); code != http.StatusOK {
			t.Fatalf("replace = %d %s", code, body)
		}
		if code, _, body := get("GET", pu.URL); code != http.StatusNotFound || strings.Contains(body, "secret") {
			t.Errorf("URL of a replaced file = %d %s, want 404", code, body)
		}
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestSlowUpload checks that a stalled upload body is cut with 408 and
// stores nothing, while a slow but steady one completes.
func TestSlowUpload(t *testing.T) {
	d := startDev(t, "CONCH_UPLOAD_IDLE_TIMEOUT=1s")
	c := &fileClient{t: t, d: d, key: d.Key, user: "slow"}
	conn, err := net.Dial("tcp", strings.TrimPrefix(d.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /api/v1/shell/io/upload?path=/stalled HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Shell-User-Id: slow\r\nContent-Length: 1000\r\n\r\nten bytes.", d.Key)
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled upload: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("stalled upload = %d, want 408", resp.StatusCode)
	}
	if code, body := c.call("GET", "/api/v1/shell/io/stat?path=/stalled", nil); code != http.StatusNotFound {
		t.Fatalf("stalled upload stored: %d %s", code, body)
	}

	pr, pw := io.Pipe()
	go func() {
		for range 5 {
			if _, err := pw.Write([]byte("steady ")); err != nil {
				return
			}
			time.Sleep(300 * time.Millisecond) // a slow client, not a wait
		}
		pw.Close()
	}()
	if code, body := c.upload("/steady", pr, -1); code != http.StatusOK {
		t.Fatalf("slow steady upload = %d %s", code, body)
	}
}
