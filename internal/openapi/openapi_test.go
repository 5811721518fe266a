package openapi_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/hookledger/hookledger/internal/openapi"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
)

// The embedded document is docs/openapi.yaml byte for byte: the copy the
// server serves and the CLI prints is the one readers and client
// generators are pointed at.
func TestDocumentIsDocsCopy(t *testing.T) {
	docs, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(docs, openapi.Document) {
		t.Fatal("internal/openapi/openapi.yaml differs from docs/openapi.yaml: edit docs/openapi.yaml, then " +
			"cp docs/openapi.yaml internal/openapi/openapi.yaml")
	}
}

// The document is a valid OpenAPI 3.1 document: it parses, its
// references resolve and every schema and example is well formed.
func TestDocumentValidates(t *testing.T) {
	v, err := openapitest.Load(openapi.Document)
	if err != nil {
		t.Fatal(err)
	}
	doc := v.Doc()
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi: %q, want 3.1.0", doc.OpenAPI)
	}
	if doc.Paths.Len() == 0 {
		t.Fatal("the document has no paths")
	}
}
