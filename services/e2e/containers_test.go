package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// wantAPIError checks that err is OpenAI's error with status and param.
func wantAPIError(t *testing.T, what string, err error, status int, param, msg string) {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("%s: error %v, want an API error %d", what, err, status)
	}
	if apiErr.StatusCode != status || apiErr.Param != param || !strings.Contains(apiErr.Message, msg) {
		t.Fatalf("%s: %d param %q %q, want %d param %q containing %q", what, apiErr.StatusCode, apiErr.Param, apiErr.Message, status, param, msg)
	}
}

// TestContainers drives the Containers API (docs/reference/containers-api.md)
// with OpenAI's own client: containers are conch sandboxes, their files those
// of the sandbox's /home/workspace.
func TestContainers(t *testing.T) {
	d := startDev(t)
	c := client(d)
	ctx := t.Context()

	ctr, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "analysis",
		ExpiresAfter: openai.ContainerNewParamsExpiresAfter{Anchor: "last_active_at", Minutes: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if ctr.ID == "" || ctr.Object != "container" || ctr.Name != "analysis" || ctr.Status != "running" || ctr.CreatedAt == 0 ||
		ctr.ExpiresAfter.Anchor != "last_active_at" || ctr.ExpiresAfter.Minutes != 5 || ctr.MemoryLimit != "1g" || ctr.NetworkPolicy.Type != "disabled" {
		t.Fatalf("created %s", ctr.RawJSON())
	}
	second, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "second", MemoryLimit: openai.ContainerNewParamsMemoryLimit4g})
	if err != nil {
		t.Fatal(err)
	}
	if second.MemoryLimit != "4g" || second.ExpiresAfter.Minutes != 20 {
		t.Fatalf("second %s", second.RawJSON())
	}

	t.Run("retrieve and list", func(t *testing.T) {
		got, err := c.Containers.Get(ctx, ctr.ID)
		if err != nil || got.ID != ctr.ID || got.Name != "analysis" {
			t.Fatalf("get = %v %v", got, err)
		}
		first, err := c.Containers.List(ctx, openai.ContainerListParams{Limit: openai.Int(1), Order: openai.ContainerListParamsOrderAsc})
		if err != nil || len(first.Data) != 1 || !first.HasMore {
			t.Fatalf("first page = %v %v", first, err)
		}
		var ids []string
		pager := c.Containers.ListAutoPaging(ctx, openai.ContainerListParams{Limit: openai.Int(1), Order: openai.ContainerListParamsOrderAsc})
		for pager.Next() {
			ids = append(ids, pager.Current().ID)
		}
		if err := pager.Err(); err != nil || !slices.Equal(ids, []string{ctr.ID, second.ID}) {
			t.Fatalf("all pages = %v %v, want %v", ids, err, []string{ctr.ID, second.ID})
		}
		named, err := c.Containers.List(ctx, openai.ContainerListParams{Name: openai.String("second")})
		if err != nil || len(named.Data) != 1 || named.Data[0].ID != second.ID {
			t.Fatalf("by name = %v %v", named, err)
		}
	})

	t.Run("files", func(t *testing.T) {
		f, err := c.Containers.Files.New(ctx, ctr.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("hello\n"), "hello.txt", "text/plain")})
		if err != nil {
			t.Fatal(err)
		}
		if f.Object != "container.file" || f.Path != "/home/workspace/hello.txt" || f.Bytes != 6 || f.ContainerID != ctr.ID || f.Source != "user" || f.CreatedAt == 0 {
			t.Fatalf("uploaded %s", f.RawJSON())
		}
		got, err := c.Containers.Files.Get(ctx, ctr.ID, f.ID)
		if err != nil || got.Path != f.Path || got.Bytes != 6 {
			t.Fatalf("get = %v %v", got, err)
		}
		if body := content(t, c, ctr.ID, f.ID); body != "hello\n" {
			t.Fatalf("content = %q", body)
		}

		// What a command writes is a file of the container too.
		code, body := d.call("POST", "/api/v1/sandboxes/"+ctr.ID+"/commands", d.Key, map[string]any{
			"command": "test \"$(stat -c %U hello.txt)\" = \"$(id -un)\" && cat hello.txt > copy.txt && mkdir -p out && echo made > out/result.txt"})
		var res struct {
			Outcome struct {
				ExitCode int `json:"exit_code"`
			} `json:"outcome"`
		}
		if err := json.Unmarshal(body, &res); code != http.StatusOK || err != nil || res.Outcome.ExitCode != 0 {
			t.Fatalf("command = %d %s", code, body)
		}
		sources := map[string]string{}
		ids := map[string]string{}
		pager := c.Containers.Files.ListAutoPaging(ctx, ctr.ID, openai.ContainerFileListParams{Limit: openai.Int(2)})
		for pager.Next() {
			sources[pager.Current().Path] = pager.Current().Source
			ids[pager.Current().Path] = pager.Current().ID
		}
		want := map[string]string{"/home/workspace/hello.txt": "user", "/home/workspace/copy.txt": "assistant", "/home/workspace/out/result.txt": "assistant"}
		if err := pager.Err(); err != nil || len(sources) != len(want) {
			t.Fatalf("files = %v %v, want %v", sources, err, want)
		}
		for p, s := range want {
			if sources[p] != s {
				t.Fatalf("files = %v, want %v", sources, want)
			}
		}
		if body := content(t, c, ctr.ID, ids["/home/workspace/out/result.txt"]); body != "made\n" {
			t.Fatalf("content of a command's file = %q", body)
		}

		// A name that would leave the workspace is refused, not rewritten.
		for _, name := range []string{"../escape.txt", "..", "sub/../../escape.txt"} {
			_, err = c.Containers.Files.New(ctx, ctr.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), name, "text/plain")})
			wantAPIError(t, "upload "+name, err, http.StatusBadRequest, "file", "plain name")
		}
		_, err = c.Containers.Files.New(ctx, ctr.ID, openai.ContainerFileNewParams{FileID: openai.String("file-abc")})
		wantAPIError(t, "upload by file_id", err, http.StatusBadRequest, "file_id", "no Files API")
		code, body = d.call("POST", "/api/v1/sandboxes/"+ctr.ID+"/commands", d.Key, map[string]any{"command": "ls -A /home; ls /home/workspace"})
		if code != http.StatusOK || !strings.Contains(string(body), `"stdout":"workspace\ncopy.txt\nhello.txt\nout\n"`) {
			t.Fatalf("after refused uploads = %d %s", code, body)
		}

		if err := c.Containers.Files.Delete(ctx, ctr.ID, f.ID); err != nil {
			t.Fatal(err)
		}
		_, err = c.Containers.Files.Get(ctx, ctr.ID, f.ID)
		wantAPIError(t, "get deleted file", err, http.StatusNotFound, "", "No file found with id")
		_, err = c.Containers.Files.Get(ctx, ctr.ID, "cfile_nope!")
		wantAPIError(t, "get unknown file id", err, http.StatusNotFound, "", "No file found with id")
	})

	t.Run("bad input names the field", func(t *testing.T) {
		_, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "x", ExpiresAfter: openai.ContainerNewParamsExpiresAfter{Anchor: "last_active_at", Minutes: 0}})
		wantAPIError(t, "minutes 0", err, http.StatusBadRequest, "expires_after.minutes", "between 1 and")
		_, err = c.Containers.New(ctx, openai.ContainerNewParams{Name: "x", MemoryLimit: "2g"})
		wantAPIError(t, "memory 2g", err, http.StatusBadRequest, "memory_limit", "one of")
		_, err = c.Containers.New(ctx, openai.ContainerNewParams{Name: "x", FileIDs: []string{"file-abc"}})
		wantAPIError(t, "file_ids", err, http.StatusBadRequest, "file_ids", "no Files API")
		_, err = c.Containers.List(ctx, openai.ContainerListParams{Limit: openai.Int(101)})
		wantAPIError(t, "limit 101", err, http.StatusBadRequest, "limit", "between 1 and 100")
		code, body := d.call("POST", "/v1/containers", d.Key, map[string]any{"name": 5})
		if code != http.StatusBadRequest || !strings.Contains(string(body), `"param":"name"`) {
			t.Fatalf("name 5 = %d %s", code, body)
		}
		_, err = c.Containers.Get(ctx, "sb-nope")
		wantAPIError(t, "unknown container", err, http.StatusNotFound, "", "No container found with id 'sb-nope'")
	})

	t.Run("another account's container is not found", func(t *testing.T) {
		other := client(d, option.WithAPIKey(newAccount(t, d, "Other")))
		_, err := other.Containers.Get(ctx, ctr.ID)
		wantAPIError(t, "get", err, http.StatusNotFound, "", "No container found")
		_, err = other.Containers.Files.List(ctx, ctr.ID, openai.ContainerFileListParams{})
		wantAPIError(t, "list files", err, http.StatusNotFound, "", "No container found")
		_, err = other.Containers.Files.New(ctx, ctr.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("x"), "x.txt", "text/plain")})
		wantAPIError(t, "upload", err, http.StatusNotFound, "", "No container found")
		err = other.Containers.Delete(ctx, ctr.ID)
		wantAPIError(t, "delete", err, http.StatusNotFound, "", "No container found")
		list, err := other.Containers.List(ctx, openai.ContainerListParams{})
		if err != nil || len(list.Data) != 0 {
			t.Fatalf("other's list = %v %v", list.RawJSON(), err)
		}
	})

	if err := c.Containers.Delete(ctx, ctr.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Containers.Get(ctx, ctr.ID)
	wantAPIError(t, "get deleted", err, http.StatusNotFound, "", "No container found")
}

// content downloads a container file through the client.
func content(t *testing.T, c openai.Client, container, id string) string {
	t.Helper()
	resp, err := c.Containers.Files.Content.Get(t.Context(), container, id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestContainerFileLimitAndPersistence checks that an upload beyond 100
// MiB is 413, and one cut short a 400, and that both leave the
// container's files as they were, and that a
// container of a user (conch's extension) keeps its files in that user's
// persistent workspace.
func TestContainerFileLimitAndPersistence(t *testing.T) {
	d := startDev(t)
	c := client(d)
	ctx := t.Context()

	ctr, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "limits"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Containers.Files.New(ctx, ctr.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("old"), "big.bin", "application/octet-stream")}); err != nil {
		t.Fatal(err)
	}
	// Streamed, so that neither side holds the 100 MiB.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		part, err := mw.CreateFormFile("file", "big.bin")
		if err == nil {
			_, err = io.Copy(part, io.LimitReader(zeros{}, limit+1))
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, err := http.NewRequestWithContext(ctx, "POST", d.URL+"/v1/containers/"+ctr.ID+"/files", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	pr.CloseWithError(io.ErrClosedPipe)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), `"param":"file"`) {
		t.Fatalf("upload of limit+1 = %d %s", resp.StatusCode, body)
	}
	// A form cut off inside the file is a broken upload, not a short file.
	cut := "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"cut.txt\"\r\n\r\npartial"
	req, err = http.NewRequestWithContext(ctx, "POST", d.URL+"/v1/containers/"+ctr.ID+"/files", strings.NewReader(cut))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Key)
	req.Header.Set("Content-Type", "multipart/form-data; boundary=b")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"param":"file"`) {
		t.Fatalf("cut upload = %d %s", resp.StatusCode, body)
	}
	code, out := d.call("POST", "/api/v1/sandboxes/"+ctr.ID+"/commands", d.Key, map[string]any{"command": "ls -A; cat big.bin"})
	if code != http.StatusOK || !strings.Contains(string(out), `"stdout":"big.bin\nold"`) {
		t.Fatalf("after a refused upload = %d %s", code, out)
	}

	persistent, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "carol's"}, option.WithJSONSet("user", "carol"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(persistent.RawJSON(), `"user":"carol"`) {
		t.Fatalf("persistent container %s", persistent.RawJSON())
	}
	if _, err := c.Containers.Files.New(ctx, persistent.ID, openai.ContainerFileNewParams{File: openai.File(strings.NewReader("kept"), "notes.txt", "text/plain")}); err != nil {
		t.Fatal(err)
	}
	// Saved before the upload was answered.
	if code, out := d.call("GET", "/api/v1/shell/io/stat?path=/notes.txt", d.Key, nil, "X-Shell-User-Id", "carol"); code != http.StatusOK {
		t.Fatalf("stat in carol's workspace = %d %s", code, out)
	}
	if err := c.Containers.Delete(ctx, persistent.ID); err != nil {
		t.Fatal(err)
	}
	again, err := c.Containers.New(ctx, openai.ContainerNewParams{Name: "carol's again"}, option.WithJSONSet("user", "carol"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := c.Containers.Files.List(ctx, again.ID, openai.ContainerFileListParams{})
	if err != nil || len(files.Data) != 1 || files.Data[0].Path != "/home/workspace/notes.txt" {
		t.Fatalf("files of carol's next container = %v %v", files.RawJSON(), err)
	}
	if body := content(t, c, again.ID, files.Data[0].ID); body != "kept" {
		t.Fatalf("content = %q", body)
	}
}
