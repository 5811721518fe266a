// Package openapi holds the OpenAPI 3.1 document of the admin and
// publishing API under /api/v1. The document is edited in
// docs/openapi.yaml, where readers and client generators find it; this
// package embeds a copy of it (a test fails when the two differ), because
// an embedded file cannot lie outside the package's directory. The API
// serves it at /api/v1/openapi.yaml and `hookledger openapi` prints it.
package openapi

import _ "embed"

// Document is the OpenAPI document, byte for byte docs/openapi.yaml.
//
//go:embed openapi.yaml
var Document []byte

// ContentType is the media type the document is served with.
const ContentType = "application/yaml"
