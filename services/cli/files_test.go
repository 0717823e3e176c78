package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/conch-sh/conch/services/internal/contract"
)

// TestFilesPutChecksTheSizeFirst: a file larger than a file may hold is
// refused before a byte is sent.
func TestFilesPutChecksTheSizeFirst(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusRequestEntityTooLarge)
	}))
	t.Cleanup(srv.Close)
	big := filepath.Join(t.TempDir(), "big.bin")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: the size without the disk.
	if err := f.Truncate(contract.MaxFileBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	err = Files(t.Context(), []string{"put", big, "/big.bin", "--server", srv.URL, "--api-key", "k", "--user", "u"}, new(strings.Builder), new(strings.Builder))
	if err == nil || !strings.Contains(err.Error(), "more than a file may hold") || requests.Load() != 0 {
		t.Fatalf("put of %d bytes: %v after %d requests", contract.MaxFileBytes+1, err, requests.Load())
	}
}

// TestFilesRmSaysTheFlag: the server's refusal names its REST parameter;
// the CLI's user is told the flag.
func TestFilesRmSaysTheFlag(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","code":"failed_precondition","message":"/dir: directory not empty; delete with recursive=true","param":null}}`))
	}))
	t.Cleanup(srv.Close)
	err := Files(t.Context(), []string{"rm", "/dir", "--server", srv.URL, "--api-key", "k", "--user", "u"}, new(strings.Builder), new(strings.Builder))
	if err == nil || strings.Contains(err.Error(), "recursive=true") || !strings.Contains(err.Error(), "conch files rm -r /dir") {
		t.Fatalf("rm of a directory: %v", err)
	}
}
