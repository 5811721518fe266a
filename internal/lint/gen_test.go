package lint

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
)

// genHeader is the inventory header the generator writes.
const genHeader = "flow_id,method,creates_records,side_effect,idempotency_key,ledger_retention_days,max_replay_window_days,retry_layers,retry_after_unit,inbound_webhook,ack_p99_seconds,sender_timeout_seconds,sources,owner"

// genRow returns the cells of one realistic flow, drawn from rng. The mix
// is chosen to exercise every rule and level: most flows are sound, some
// have the mistakes the linter exists for.
func genRow(rng *rand.Rand, i int) []string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	id := fmt.Sprintf("%s_to_%s_%d", pick("billing", "crm", "shop", "support", "ads"), pick("crm", "erp", "mail", "warehouse", "slack"), i)
	return []string{
		id,
		pick("custom", "ipaas", "event_pipeline", "Custom"),
		pick("yes", "no", "Y", "false", ""),
		pick("none", "upsert_deal", "send_email", "create_invoice", ""),
		pick(id+"+object_id+revision", "event_id", "deal_id+attempt", "order_id+version", "", "message_id+"+id, "known_id+version", "uuid4()"),
		pick("30", "90", "14", "", "7.5"),
		pick("30", "60", "3", "", "0.5"),
		pick("none", "worker:6", "sdk:3;worker:5", "sdk:2;worker:5", "", "sdk:1;http:1;worker:10"),
		pick("seconds", "milliseconds", "", "http-date"),
		pick("yes", "no", "true", ""),
		pick("0.4", "1", "2.5", "4", ""),
		pick("5", "10", "", "30"),
		pick("", "stripe", "hubspot-app;hubspot-journal", "zapier", "pipedrive", "segment;meta"),
		pick("revops", "finance", "ops"),
	}
}

// genCSV writes a deterministic inventory of n flows.
func genCSV(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var b bytes.Buffer
	b.WriteString(genHeader)
	b.WriteByte('\n')
	for i := range n {
		b.WriteString(strings.Join(genRow(rng, i), ","))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// genYAML writes the same kind of inventory as a YAML list.
func genYAML(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cols := strings.Split(genHeader, ",")
	var b bytes.Buffer
	for i := range n {
		for j, v := range genRow(rng, i) {
			prefix := "  "
			if j == 0 {
				prefix = "- "
			}
			if v == "" {
				fmt.Fprintf(&b, "%s%s:\n", prefix, cols[j])
				continue
			}
			fmt.Fprintf(&b, "%s%s: %q\n", prefix, cols[j], v)
		}
	}
	return b.Bytes()
}
