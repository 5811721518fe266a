// Package deploy holds the deployment files of hookledger (compose.yaml,
// kubernetes/, hookledger.service and the container configuration
// hookledger.yaml) and the tests that parse each of them with the parser
// of the tool that reads it: compose-go for the compose file (with the
// compose specification's JSON schema), Kubernetes' own API types, decoded
// strictly, for the manifests, and systemd-analyze for the unit.
//
// It is a Go module of its own because those parsers bring some forty
// modules (Kubernetes' apimachinery, compose-go's interpolation and schema
// libraries) that neither the product binary nor its tests need: in the
// main go.mod they would be listed, audited and upgraded with the product's
// dependencies. make test runs these tests too (scripts/test.sh).
package deploy
