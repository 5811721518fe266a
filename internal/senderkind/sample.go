package senderkind

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// samples are the built-in sample events of `hookledger send`, one
// directory per kind, each sample a JSON file named after it. A kind's
// Sample names its default and its Fill writes fresh identities into it.
//
//go:embed samples
var samples embed.FS

// SampleNames lists the kind's built-in samples, sorted.
func (k Kind) SampleNames() []string {
	entries, _ := samples.ReadDir(path.Join("samples", k.Name))
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	return names
}

// SampleBody returns the named built-in sample as it is stored.
func (k Kind) SampleBody(name string) ([]byte, bool) {
	b, err := samples.ReadFile(path.Join("samples", k.Name, name+".json"))
	return b, err == nil
}

// SampleOptions are what a sample is filled with.
type SampleOptions struct {
	// Source is the source the sample is sent to (its fields).
	Source Source
	// Account is the source's account, written where the kind names the
	// tenant; empty writes none.
	Account string
	// ID is the event id to send; empty means fresh ids on every send.
	ID string
	// Now is the send time.
	Now time.Time
}

// FillSample gives a sample fresh identities and times, through the kind's
// Fill. It returns the body, the id for a scheme that signs it in a header
// (standard-webhooks webhook-id: ID, or a fresh one) and the headers the
// source reads its identity from (fields.event_id: header:NAME), which the
// request must carry too.
func (k Kind) FillSample(raw []byte, o SampleOptions) ([]byte, string, http.Header, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	// Numbers keep their digits: HubSpot object ids exceed 2^53.
	dec.UseNumber()
	s := &SampleDoc{SampleOptions: o, HeaderID: o.ID, Header: http.Header{}}
	if err := dec.Decode(&s.Doc); err != nil {
		return nil, "", nil, fmt.Errorf("sample: %w", err)
	}
	if k.Fill != nil {
		k.Fill(s)
	}
	if s.HeaderID == "" {
		s.HeaderID = "msg_" + uuid.NewString()
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s.Doc); err != nil {
		return nil, "", nil, fmt.Errorf("sample: %w", err)
	}
	return buf.Bytes(), s.HeaderID, s.Header, nil
}

// SampleDoc is a sample being filled by a kind's Fill.
type SampleDoc struct {
	SampleOptions
	// Doc is the sample's JSON, numbers as json.Number.
	Doc any
	// HeaderID is the id a scheme signs in a header; Fill sets it for a
	// kind that carries its id there.
	HeaderID string
	// Header holds headers the request must carry.
	Header http.Header
}

// Fresh returns a new random id: prefix and 20 hex digits, or a UUID for
// the prefix "uuid".
func (s *SampleDoc) Fresh(prefix string) string {
	if prefix == "uuid" {
		return uuid.NewString()
	}
	return prefix + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
}

// Nth is the id of a body's n-th event: ID for the first, then suffixed,
// so a batch never repeats one event; fresh ones when ID is empty.
func (s *SampleDoc) Nth(n int, prefix string) string {
	switch {
	case s.ID == "":
		return s.Fresh(prefix)
	case n == 0:
		return s.ID
	}
	return s.ID + "-" + strconv.Itoa(n+1)
}

// Seconds is Now as a JSON number of unix seconds.
func (s *SampleDoc) Seconds() json.Number {
	return json.Number(strconv.FormatInt(s.Now.Unix(), 10))
}

// RFC3339 is Now in UTC as RFC 3339, to the second.
func (s *SampleDoc) RFC3339() string { return s.Now.UTC().Format(time.RFC3339) }

// AccountValue is the account as a JSON number when it is one (HubSpot's
// portalId, Pipedrive's company_id), else as a string.
func (s *SampleDoc) AccountValue() any {
	if n, err := strconv.ParseInt(s.Account, 10, 64); err == nil {
		return json.Number(strconv.FormatInt(n, 10))
	}
	return s.Account
}

// Get returns the value at a dotted path of object keys, nil when absent.
func (s *SampleDoc) Get(p string) any { return getPath(s.Doc, p) }

// Set writes v at a dotted path of object keys, making the objects on the
// way.
func (s *SampleDoc) Set(p string, v any) { setPath(s.Doc, p, v) }

func getPath(doc any, p string) any {
	for _, k := range strings.Split(p, ".") {
		m, ok := doc.(map[string]any)
		if !ok {
			return nil
		}
		doc = m[k]
	}
	return doc
}

func setPath(doc any, p string, v any) {
	keys := strings.Split(p, ".")
	for _, k := range keys[:len(keys)-1] {
		m, ok := doc.(map[string]any)
		if !ok {
			return
		}
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		doc = next
	}
	if m, ok := doc.(map[string]any); ok {
		m[keys[len(keys)-1]] = v
	}
}
