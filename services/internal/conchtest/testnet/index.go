package testnet

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
)

// WheelName is the one file of the package index.
const WheelName = "conchdemo-1.0-py3-none-any.whl"

// wheel is a minimal wheel of conchdemo 1.0.
var wheel = sync.OnceValue(func() []byte {
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	for _, f := range [][2]string{
		{"conchdemo/__init__.py", "GREETING = 'hello'\n"},
		{"conchdemo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: conchdemo\nVersion: 1.0\n"},
		{"conchdemo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: conch-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{"conchdemo-1.0.dist-info/RECORD", ""},
	} {
		w, _ := z.Create(f[0])
		_, _ = w.Write([]byte(f[1]))
	}
	_ = z.Close()
	return buf.Bytes()
})

// serveIndex answers the package index's pages; it reports whether r was
// one of them.
func serveIndex(w http.ResponseWriter, r *http.Request) bool {
	switch r.URL.Path {
	case "/simple/conchdemo/":
		sum := sha256.Sum256(wheel())
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"/packages/%s#sha256=%s\">%s</a></body></html>\n", WheelName, hex.EncodeToString(sum[:]), WheelName)
	case "/packages/" + WheelName:
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(wheel())
	default:
		return false
	}
	return true
}
