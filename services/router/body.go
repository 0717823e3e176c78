package router

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"

	"github.com/conch-sh/conch/services/internal/platform/errs"
)

// maxSmallBody bounds the JSON body of the router's own small requests
// (a port to expose, a terminal token's lifetime).
const maxSmallBody = 4 << 10

// decodeSmallBody decodes r's JSON body, of at most maxSmallBody bytes
// and no field v lacks, into v; want says its shape in the refusal. An
// empty body is refused unless optional, when v keeps its zero value.
func decodeSmallBody(w http.ResponseWriter, r *http.Request, v any, optional bool, want string) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSmallBody))
	if err != nil {
		return errs.New(errs.InvalidArgument, "body: at most 4 KiB of JSON")
	}
	if optional && len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errs.New(errs.InvalidArgument, "body: want %s: %v", want, err)
	}
	return nil
}
