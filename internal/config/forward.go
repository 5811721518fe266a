package config

import (
	"fmt"
	"strings"
)

// forwardEffect is the name of the one effect a forward flow makes per
// event: its episode keys end in ":forward".
const forwardEffect = "forward"

// orderByOccurrence orders a forward flow's events per entity by their
// occurrence time.
const orderByOccurrence = "occurrence"

// Forward sends every accepted event of a flow's source, as received, to
// one destination (docs/flows.md, "Forwarding").
type Forward struct {
	Destination string `yaml:"destination"`
}

// Signing makes a destination's calls carry Standard Webhooks headers
// (webhook-id, webhook-timestamp, webhook-signature), so the receiving app
// can verify that they come from hookledger (docs/delivery.md, "Signing").
type Signing struct {
	// Secrets are whsec_ (HMAC-SHA256) or whsk_ (ed25519) keys; each signs
	// every call, so during a rotation a receiver that knows either key
	// verifies it.
	Secrets []string `yaml:"secrets"`
}

// expandForward checks a forward flow's own keys and writes the flow the
// engine runs in their place: the flow is an ordinary flow afterwards, so
// the ledger, the exception queue, the signals and replay treat it as any
// other. Without order_by every event is its own entity (its event id), at
// one constant revision: the episode key flow:event_id:r0:forward is then
// one per source and event id, no event waits for another, and a replay
// of a forwarded event finds its episode in the ledger and sends nothing.
// With order_by: occurrence the user's entity groups events, which are
// processed in occurrence-time order, the event id breaking ties.
func expandForward(add func(path, format string, args ...any), f *Flow, p string) {
	if f.Forward == nil {
		if f.OrderBy != "" {
			add(p+".order_by", "flow %q: order_by applies to forward flows only (forward: {destination: NAME})", f.Name)
		}
		return
	}
	fw := f.Forward
	switch {
	case fw.Destination == "":
		add(p+".forward", "flow %q: forward.destination is required: the destination every event is sent to", f.Name)
	case fw.Destination == publishDestination:
		add(p+".forward.destination", "flow %q: forward.destination %q: a forward sends the event as received to a destination; publishing to the endpoints takes an effect with type and data (docs/publishing.md)", f.Name, fw.Destination)
	}
	if len(f.Effects) > 0 {
		add(p+".effects", "flow %q: forward makes the flow's one effect itself; remove effects, or remove forward and write the effects", f.Name)
	}
	if f.State != "" {
		add(p+".state", "flow %q: forward keeps no state of its own; remove state", f.Name)
	}
	if v := f.Version; v.Mode != "" || v.Revision != "" || v.Path != "" || v.Query != "" || v.Field != "" || len(v.Hash) > 0 || v.TieBreak != "" {
		add(p+".version", "flow %q: forward sets the version itself; remove version (order_by: occurrence orders an entity's events by their occurrence time)", f.Name)
	}
	switch f.OrderBy {
	case "":
		if f.Entity != "" {
			add(p+".entity", "flow %q: entity applies to a forward flow with order_by: occurrence; without it every event is forwarded on its own", f.Name)
		}
		f.Entity = "meta.event_id"
		f.Version = FlowVersion{Mode: ModeRevision, Revision: "0"}
	case orderByOccurrence:
		if strings.TrimSpace(f.Entity) == "" {
			add(p, "flow %q: order_by: occurrence needs entity: the expression whose value groups the events kept in order (for example event.data.object.customer)", f.Name)
		}
		f.Version = FlowVersion{Mode: ModeOccurredAt, TieBreak: "meta.event_id"}
	default:
		add(p+".order_by", "flow %q: unknown order_by %q (occurrence, or leave it out)", f.Name, f.OrderBy)
		f.Version = FlowVersion{Mode: ModeRevision, Revision: "0"}
	}
	// The state is the event's type: small, and equal for a replay of
	// the same event, so a replay is a duplicate and never a conflict.
	f.State = "meta.type"
	f.Effects = []Effect{{Name: forwardEffect, Destination: fw.Destination, Operation: "set",
		Request: EffectRequest{Method: "POST", Path: `""`}}}
}

// effectPath is the YAML path of an effect's field for messages: a
// forward flow's one effect is written as its forward block.
func (f *Flow) effectPath(i, j int, field string) string {
	if f.Forward != nil {
		if field == "destination" {
			return fmt.Sprintf("$.flows[%d].forward.destination", i)
		}
		return fmt.Sprintf("$.flows[%d].forward", i)
	}
	p := fmt.Sprintf("$.flows[%d].effects[%d]", i, j)
	if field != "" {
		p += "." + field
	}
	return p
}

// checkSigning refuses a signing block that could not sign: no key, a key
// of another format, or a public key (whpk_), which only verifies. The
// message names the key by its place, never its value.
func checkSigning(add func(path, format string, args ...any), p string, d *Destination) {
	s := d.Signing
	if s == nil {
		return
	}
	if d.Kind != "http" {
		add(p+".signing", "destination %q: signing needs kind http: a custom action makes its own calls", d.Name)
	}
	if len(s.Secrets) == 0 {
		add(p+".signing", "destination %q: signing.secrets is required: one or more whsec_ or whsk_ keys", d.Name)
	}
	for k, key := range s.Secrets {
		if _, _, err := ParseSecret(key); err != nil {
			add(fmt.Sprintf("%s.signing.secrets[%d]", p, k), "destination %q: signing.secrets[%d]: %v", d.Name, k, err)
		}
	}
}
