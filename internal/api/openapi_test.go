package api_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/store"
)

// The document names exactly the query parameters each list reads (a
// list refuses any other with a 400, so a missing one would be a filter
// no generated client can send), and no query parameter on the
// resources that take none.
func TestOpenAPIQueryParameters(t *testing.T) {
	doc := openapitest.Default(t).Doc()
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			route := method + " " + path
			var documented []string
			for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
				if p.Value.In == openapi3.ParameterInQuery {
					documented = append(documented, p.Value.Name)
				}
			}
			want := api.QueryParams[route]
			slices.Sort(documented)
			want = slices.Sorted(slices.Values(want))
			if !slices.Equal(documented, want) {
				t.Errorf("%s: the document names the query parameters %v, the code reads %v", route, documented, want)
			}
		}
	}
	for route := range api.QueryParams {
		method, path, _ := strings.Cut(route, " ")
		if item := doc.Paths.Value(path); item == nil || item.GetOperation(method) == nil {
			t.Errorf("%s reads query parameters but is not in the document", route)
		}
	}
}

// The closed sets the document lists are the code's: a state, a
// disposition or an error class the store adds must be added to the
// document, whose enums a generated client enforces.
func TestOpenAPIEnums(t *testing.T) {
	schemas := openapitest.Default(t).Doc().Components.Schemas
	for name, want := range map[string][]string{
		"Disposition": strs(store.Dispositions()),
		"EffectState": strs(store.EffectStates()),
		"ErrorClass":  strs(store.ErrorClasses()),
	} {
		var got []string
		for _, v := range schemas[name].Value.Enum {
			got = append(got, v.(string))
		}
		if !slices.Equal(got, want) {
			t.Errorf("schema %s: enum %v, the code's set is %v", name, got, want)
		}
	}
	var kinds []string
	for _, v := range schemas["Exception"].Value.Properties["kind"].Value.Enum {
		kinds = append(kinds, v.(string))
	}
	if want := store.ExceptionKinds(); !slices.Equal(kinds, want) {
		t.Errorf("Exception.kind: enum %v, the code's set is %v", kinds, want)
	}
}

func strs[T ~string](in []T) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	return out
}
