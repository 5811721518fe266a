package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/console"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/publish"
)

// consoleAttachments hands the console the running parts it shows or
// drives: the flow engine for replays, the delivery worker's wake-up and
// token buckets, the metrics registry and the configured names.
func consoleAttachments(cfg *config.Config, engine *flow.Engine, worker *deliver.Worker, pub *publish.Service, reg *prometheus.Registry) console.Attachments {
	a := console.Attachments{Router: engine, Compensations: engine, Wake: worker.Wake, Metrics: reg, Endpoints: pub,
		IdempotencyKey: deliver.KeyFunc(cfg), Owners: cfg.Owners(),
		Limits: func() []console.DestinationLimit {
			var out []console.DestinationLimit
			for _, l := range worker.Limits() {
				out = append(out, console.DestinationLimit{Destination: l.Destination, PerSecond: l.PerSecond, Burst: l.Burst,
					Tokens: l.Tokens, InFlight: l.InFlight, MaxInFlight: l.MaxInFlight})
			}
			return out
		}}
	for _, s := range cfg.Sources {
		a.Sources = append(a.Sources, s.Name)
	}
	for _, d := range cfg.Destinations {
		a.Destinations = append(a.Destinations, d.Name)
	}
	a.VersionModes = make(map[string]string, len(cfg.Flows))
	for _, f := range cfg.Flows {
		a.VersionModes[f.Name] = f.Version.Mode
	}
	return a
}
