package console

import (
	"context"
	"encoding/json"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/publish"
	"github.com/hookledger/hookledger/internal/replay"
	"github.com/hookledger/hookledger/internal/store"
)

// Attachments are the parts of a running server the console shows or
// drives beyond the store; every field is optional, and the pages say
// what is missing rather than guess.
type Attachments struct {
	// Router computes an event's routes (the flow engine): the replay
	// page plans and runs replays with it. Without it the page is off.
	Router replay.Router
	// Wake starts the delivery worker's next pass at once (after a bulk
	// retry approved effects again).
	Wake func()
	// Metrics is the server's Prometheus registry: the sources page reads
	// the receiver's request counters from it.
	Metrics prometheus.Gatherer
	// Limits reports each destination's token bucket and calls in flight.
	Limits func() []DestinationLimit
	// Sources and Destinations are the configured names, so that a source
	// that has never sent anything is listed too.
	Sources      []string
	Destinations []string
	// Compensations renders compensation requests from the configured
	// effect definitions (the flow engine): without it the effect page
	// offers no compensate button.
	Compensations Compensator
	// Endpoints lists the publishing endpoints and enables or disables
	// them (the publishing service): without it the endpoints page is off.
	Endpoints EndpointControl
	// IdempotencyKey names the header an effect's destination dedupes on
	// and the key it is sent there (deliver.KeyFunc), "" for none: the
	// effect page shows it beside the episode key, since a vendor's
	// dashboard shows that one.
	IdempotencyKey func(destination, episodeKey string) (header, key string)
	// Owners are the configured owners of destinations and flows: the
	// exception queue names them where nobody was assigned.
	Owners store.Owners
	// VersionModes are the configured flows' version modes (revision,
	// occurred_at, refetch) by flow name: the entity page reads a work
	// item's order key by its flow's mode (a refetching flow orders by
	// arrival). Without it the key is read by its shape.
	VersionModes map[string]string
}

// EndpointControl is what the endpoints page reads and does;
// *publish.Service implements it.
type EndpointControl interface {
	List(ctx context.Context) ([]*store.Endpoint, error)
	Backlogs(ctx context.Context) (map[string]publish.Counts, error)
	SetEnabled(ctx context.Context, id string, enabled bool, reason, actor string) (*store.Endpoint, error)
}

// Compensator renders an effect's compensation request from its flow's
// effect definition; *flow.Engine implements it.
type Compensator interface {
	HasCompensation(o *store.Effect) bool
	CompensationRequest(ctx context.Context, o *store.Effect) (json.RawMessage, error)
}

// DestinationLimit is one destination's rate limit as the delivery worker
// holds it now.
type DestinationLimit struct {
	Destination string
	// PerSecond and Burst are the token bucket's refill rate and size (0:
	// no rate limit); Tokens is what the bucket holds now.
	PerSecond float64
	Burst     int
	Tokens    float64
	// InFlight counts the calls under way; MaxInFlight bounds them.
	InFlight, MaxInFlight int
}

// extra is what Attach handed over.
type extra struct {
	Attachments
}

// Attach hands the console the server's parts it shows or drives; call it
// before serving.
func (c *Console) Attach(a Attachments) {
	c.extra = extra{a}
}
