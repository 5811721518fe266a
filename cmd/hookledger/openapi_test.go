package main

import (
	"bytes"
	"os"
	"testing"
)

// hookledger openapi prints docs/openapi.yaml byte for byte, the document
// a client generator is pointed at; an argument is a usage error.
func TestOpenAPIPrintsTheDocument(t *testing.T) {
	want, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", nil, "openapi")
	if code != exitOK || errOut != "" || !bytes.Equal([]byte(out), want) {
		t.Fatalf("openapi: exit %d, stderr %q, %d bytes; want docs/openapi.yaml (%d bytes)", code, errOut, len(out), len(want))
	}
	if code, _, errOut := run(t, "", nil, "openapi", "extra"); code != exitUsage || errOut == "" {
		t.Fatalf("openapi extra: exit %d %q, want a usage error", code, errOut)
	}
}
