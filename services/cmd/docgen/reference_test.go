package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// referenceDir holds the committed references, from this package's
// directory.
var referenceDir = filepath.Join("..", "..", "..", "docs", "reference")

// Each committed reference is what its generator writes now: a setting or
// a client command added, removed or reworded without `make gen` fails
// here.
func TestReferencesAreCurrent(t *testing.T) {
	t.Parallel()
	for _, r := range references {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			want, err := r.gen()
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(referenceDir, r.name))
			if err != nil {
				t.Fatalf("%v: run make gen", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("docs/reference/%s differs from what the code documents: run make gen and commit it", r.name)
			}
		})
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"conch secrets rotate":          "conch-secrets-rotate",
		"conch etcd-pki":                "conch-etcd-pki",
		"etcd client":                   "etcd-client",
		"Account quotas":                "account-quotas",
		"conch approvals allowlist add": "conch-approvals-allowlist-add",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// restReferencePath is the REST API's OpenAPI document, which make gen
// writes from the protos.
var restReferencePath = filepath.Join(referenceDir, "rest-api", "conch.swagger.json")

// Every operation of the REST reference documents conch's error envelope
// and the merged document keeps conch's info: both come from
// proto/conch/openapi.yaml, which must list every proto file.
func TestRESTReferenceDocumentsErrors(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(restReferencePath)
	if err != nil {
		t.Fatalf("%v: run make gen", err)
	}
	var doc struct {
		Info  struct{ Title string }
		Paths map[string]map[string]struct {
			Responses map[string]struct{ Description string }
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Info.Title != "conch REST API" {
		t.Errorf("info.title = %q: a proto file is missing from proto/conch/openapi.yaml", doc.Info.Title)
	}
	if len(doc.Paths) == 0 {
		t.Fatal("no paths")
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if !strings.Contains(op.Responses["default"].Description, `{"error": {"type", "code", "message", "param"}}`) {
				t.Errorf("%s %s: the default response is not conch's error envelope: list its proto file in proto/conch/openapi.yaml", method, path)
			}
		}
	}
}
