package skills

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/router/frontend"
)

// testErrors writes errors as {"status", "param", "message"}.
func testErrors(w http.ResponseWriter, err error) {
	a := errs.Public(err)
	frontend.WriteJSON(w, a.Status, map[string]any{"param": a.Param, "message": a.Message})
}

type client struct {
	t       *testing.T
	h       http.Handler
	account string
}

func (c client) do(method, path string, body []byte, contentType string) (int, map[string]any) {
	c.t.Helper()
	r := httptest.NewRequestWithContext(tenant.With(c.t.Context(), tenant.Scope{Account: c.account}), method, path, bytes.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	c.h.ServeHTTP(w, r)
	var m map[string]any
	if w.Header().Get("Content-Type") == "application/json" {
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
			c.t.Fatalf("%s %s: %v: %s", method, path, err, w.Body)
		}
	}
	return w.Code, m
}

func multipartBody(t *testing.T, fields map[string]string, files ...[2]string) ([]byte, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	for _, f := range files {
		w, _ := mw.CreateFormFile("files[]", f[0])
		_, _ = w.Write([]byte(f[1]))
	}
	_ = mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}

func TestHTTPShapes(t *testing.T) {
	s, _ := newStore(t, 10)
	h := NewHandler(s, nil, testErrors, testErrors)
	oa, an := client{t, h.OpenAI, "acct"}, client{t, h.Anthropic, "acct"}

	body, ct := multipartBody(t, map[string]string{"display_name": "PDF tools"}, [2]string{"pdf/SKILL.md", manifest}, [2]string{"pdf/a.txt", "a"})
	code, sk := an.do("POST", "/v1/skills", body, ct)
	if code != 200 || sk["type"] != "skill" || sk["display_name"] != "PDF tools" || sk["latest_version_id"] != "1" || sk["source"].(map[string]any)["type"] != "custom" {
		t.Fatalf("anthropic create: %d %v", code, sk)
	}
	id := sk["id"].(string)
	code, got := oa.do("GET", "/v1/skills/"+id, nil, "")
	if code != 200 || got["object"] != "skill" || got["name"] != "pdf-tools" || got["description"] != "Fill and read PDF forms." || got["default_version"] != "1" {
		t.Fatalf("openai get: %d %v", code, got)
	}
	body, ct = multipartBody(t, map[string]string{"default": "true"}, [2]string{"pdf/SKILL.md", manifest})
	if code, v := oa.do("POST", "/v1/skills/"+id+"/versions", body, ct); code != 200 || v["object"] != "skill.version" || v["version"] != "2" {
		t.Fatalf("openai version: %d %v", code, v)
	}
	if code, v := an.do("GET", "/v1/skills/"+id+"/versions/2", nil, ""); code != 200 || v["type"] != "skill_version" || v["id"] != "2" || v["name"] != "pdf-tools" {
		t.Fatalf("anthropic version: %d %v", code, v)
	}
	if code, l := oa.do("GET", "/v1/skills/"+id+"/versions?order=asc&limit=1", nil, ""); code != 200 || l["has_more"] != true || len(l["data"].([]any)) != 1 {
		t.Fatalf("openai versions: %d %v", code, l)
	}
	if code, l := an.do("GET", "/v1/skills/"+id+"/versions?limit=1&page=1", nil, ""); code != 200 || l["has_more"] != false || l["data"].([]any)[0].(map[string]any)["id"] != "2" {
		t.Fatalf("anthropic versions page 2: %d %v", code, l)
	}
	if code, u := oa.do("POST", "/v1/skills/"+id, []byte(`{"default_version": 1}`), "application/json"); code != 200 || u["default_version"] != "1" {
		t.Fatalf("openai update: %d %v", code, u)
	}
	if code, _ := oa.do("GET", "/v1/skills/"+id+"/versions/2/content", nil, ""); code != 200 {
		t.Fatalf("content: %d", code)
	}
	if code, l := an.do("GET", "/v1/skills", nil, ""); code != 200 || len(l["data"].([]any)) != 1 {
		t.Fatalf("anthropic list: %d %v", code, l)
	}
	if code, l := an.do("GET", "/v1/skills?source=anthropic", nil, ""); code != 200 || len(l["data"].([]any)) != 0 {
		t.Fatalf("anthropic's own skills: %d %v", code, l)
	}

	var parts [][2]string
	for i := range 10 {
		parts = append(parts, [2]string{"pdf/" + strings.Repeat("f", i+1), strings.Repeat("x", 1<<20)})
	}
	big, bigCT := multipartBody(t, nil, parts...)
	badTitle, badTitleCT := multipartBody(t, map[string]string{"display_name": "two\nlines"}, [2]string{"pdf/SKILL.md", manifest})
	errCases := []struct {
		c           client
		method, url string
		body        []byte
		ct          string
		status      int
		param       string
	}{
		{oa, "POST", "/v1/skills", []byte("{}"), "application/json", 400, "files"},
		{oa, "GET", "/v1/skills/" + id, nil, "", 200, ""},
		{client{t, h.OpenAI, "other"}, "GET", "/v1/skills/" + id, nil, "", 404, ""},
		{client{t, h.Anthropic, "other"}, "DELETE", "/v1/skills/" + id, nil, "", 404, ""},
		{oa, "GET", "/v1/skills/" + id + "/versions/7", nil, "", 404, ""},
		{oa, "POST", "/v1/skills/" + id, []byte(`{"default_version": "9"}`), "application/json", 404, "default_version"},
		{oa, "POST", "/v1/skills/" + id, []byte(`{"default": 1}`), "application/json", 400, "default_version"},
		{oa, "GET", "/v1/skills?limit=0", nil, "", 400, "limit"},
		{oa, "GET", "/v1/skills?order=up", nil, "", 400, "order"},
		{an, "GET", "/v1/skills?page=nope", nil, "", 400, "page"},
		{oa, "GET", "/v1/skills/" + id + "/nothing", nil, "", 404, ""},
		{oa, "POST", "/v1/skills", big, bigCT, 413, "files"},
		{an, "POST", "/v1/skills", badTitle, badTitleCT, 400, "display_name"},
	}
	for _, tt := range errCases {
		code, m := tt.c.do(tt.method, tt.url, tt.body, tt.ct)
		if code != tt.status || (tt.param != "" && m["param"] != tt.param) {
			t.Errorf("%s %s: %d %v, want %d naming %q", tt.method, tt.url, code, m, tt.status, tt.param)
		}
	}
	if code, d := an.do("DELETE", "/v1/skills/"+id+"/versions/2", nil, ""); code != 200 || d["type"] != "skill_version_deleted" {
		t.Fatalf("anthropic delete version: %d %v", code, d)
	}
	if code, d := oa.do("DELETE", "/v1/skills/"+id, nil, ""); code != 200 || d["object"] != "skill.deleted" || d["deleted"] != true {
		t.Fatalf("openai delete: %d %v", code, d)
	}
	if code, _ := oa.do("GET", "/v1/skills/"+id, nil, ""); code != 404 {
		t.Fatalf("deleted: %d", code)
	}
}
