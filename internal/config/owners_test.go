package config

import (
	"reflect"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
)

// A flow's and a destination's owner: reach the exception queue's owners;
// a name without one is left out, so nothing reads as owned by "".
func TestOwners(t *testing.T) {
	c, err := Parse("f.yaml", []byte(flowBase+`  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
    owner: team-orders
    effects:
      - {name: a, destination: crm, request: {path: '"/a"'}}
      - {name: b, destination: mail, request: {path: '"/b"'}}
  - name: quiet
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
destinations:
  - {name: crm, base_url: "https://crm.example", owner: team-crm}
  - {name: mail, base_url: "https://mail.example"}
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := store.Owners{Destinations: map[string]string{"crm": "team-crm"}, Flows: map[string]string{"orders": "team-orders"}}
	if got := c.Owners(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Owners() = %+v, want %+v", got, want)
	}
}
