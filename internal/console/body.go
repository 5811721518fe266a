package console

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hookledger/hookledger/internal/bodyview"
	"github.com/hookledger/hookledger/internal/store"
)

// maxPageBytes is the most any page or fragment is built to. The bounds
// below keep every page well under it (a body shows at most 128 KiB of
// indented text, five at most 640 KiB escaped each, on an event page;
// lists hold at most 1000 rows), so it is a backstop: whatever the store
// holds, building a page never takes more than this, and a page that
// would is refused with a message instead.
const maxPageBytes = 8 << 20

// deliveriesPerPage is how many deliveries, with their bodies, an event
// page shows. An event has a delivery per sender retry; a handful is
// usual, and each shows up to 128 KiB of text.
const deliveriesPerPage = 5

// errPageTooLarge stops a template that writes past maxPageBytes.
var errPageTooLarge = errors.New("page larger than the console's page budget")

// pageBuffer is a page being built, refusing to grow past most bytes. It
// holds the page in chunks of pageChunk bytes rather than one growing
// slice, so that building a page of n bytes allocates n bytes, not the 2n
// of a buffer that doubles and copies.
type pageBuffer struct {
	chunks [][]byte
	n      int
	most   int
}

const pageChunk = 32 << 10

func (b *pageBuffer) Write(p []byte) (int, error) {
	if b.n+len(p) > b.most {
		return 0, errPageTooLarge
	}
	b.n += len(p)
	for rest := p; len(rest) > 0; {
		if len(b.chunks) == 0 || len(b.chunks[len(b.chunks)-1]) == pageChunk {
			b.chunks = append(b.chunks, make([]byte, 0, pageChunk))
		}
		last := &b.chunks[len(b.chunks)-1]
		k := min(pageChunk-len(*last), len(rest))
		*last = append(*last, rest[:k]...)
		rest = rest[k:]
	}
	return len(p), nil
}

// Len is the page's size so far.
func (b *pageBuffer) Len() int { return b.n }

// WriteTo writes the page out.
func (b *pageBuffer) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, c := range b.chunks {
		k, err := w.Write(c)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// shownBody is a stored body as a page shows it (package bodyview), with
// the address of its raw bytes; the rows template's "body" block renders
// it.
type shownBody struct {
	bodyview.View
	// Label names the body for a screen reader.
	Label string
	// Raw is the console address that serves the body's bytes whole.
	Raw string
}

// deliveryView is one delivery on the event page.
type deliveryView struct {
	*store.Delivery
	Shown shownBody
}

func newDeliveryView(d *store.Delivery) deliveryView {
	return deliveryView{Delivery: d, Shown: shownBody{View: bodyview.RenderPrefix(d.Body, d.BodySize),
		Label: "Body of delivery " + strconv.FormatInt(d.ID, 10), Raw: deliveryBodyLink(d.ID)}}
}

func deliveryBodyLink(id int64) string {
	return "/deliveries/" + strconv.FormatInt(id, 10) + "/body"
}

func stateLink(flow, entity string) string {
	return "/entity/state?" + url.Values{"flow": {flow}, "entity": {entity}}.Encode()
}

func requestLink(id int64) string {
	return "/effects/" + strconv.FormatInt(id, 10) + "/request"
}

// bodyRoutes serve the raw bytes behind every body a page shows cut or
// unindented.
func (c *Console) bodyRoutes() {
	c.handle("GET /deliveries/{id}/body", c.rawDeliveryBody)
	c.handle("GET /entity/state", c.rawEntityState)
	c.handle("GET /effects/{id}/request", c.rawEffectRequest)
	c.handle("GET /effects/{id}/request/body", c.rawEffectRequestBody)
}

// writeRaw answers stored bytes as a download: an attachment of an opaque
// type that the browser must not sniff, so that no body is ever rendered
// as a page of the console's origin, whatever it holds.
func writeRaw(w http.ResponseWriter, filename string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filename}))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func pathID(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return id, err == nil && id > 0
}

// rawDeliveryBody serves GET /deliveries/{id}/body: one delivery's body
// as received.
func (c *Console) rawDeliveryBody(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(r)
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such delivery.")
		return
	}
	// Deliveries are listed by id: the first after id-1 is id, if it is
	// stored.
	ds, err := c.st.DeliveryList(r.Context(), &store.DeliveryListParams{AfterID: id - 1, Limit: 1})
	if err != nil {
		c.storeFailed(w, r, "get delivery", err)
		return
	}
	if len(ds) == 0 || ds[0].ID != id {
		c.fail(w, r, http.StatusNotFound, "No delivery "+strconv.FormatInt(id, 10)+".")
		return
	}
	writeRaw(w, "delivery-"+strconv.FormatInt(id, 10)+"-body", ds[0].Body)
}

// rawEntityState serves GET /entity/state?flow=F&entity=E: the
// projection's state as the store holds it.
func (c *Console) rawEntityState(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	flow, entity := q.Get("flow"), q.Get("entity")
	if flow == "" || entity == "" {
		c.fail(w, r, http.StatusBadRequest, "An entity is named by flow and entity.")
		return
	}
	if !c.textParams(w, r, "flow", flow, "entity", entity) {
		return
	}
	pr, err := c.st.ProjectionGet(r.Context(), &store.ProjectionGetParams{Flow: flow, Entity: entity})
	if err != nil {
		c.storeFailed(w, r, "get projection", err)
		return
	}
	if pr == nil {
		c.fail(w, r, http.StatusNotFound, "No state for entity "+entity+" of flow "+flow+".")
		return
	}
	writeRaw(w, "entity-state.json", pr.State)
}

// rawEffectRequest serves GET /effects/{id}/request: the effect's
// request as the store holds it.
func (c *Console) rawEffectRequest(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(r)
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such effect.")
		return
	}
	e, err := c.st.EffectGet(r.Context(), id)
	if err != nil {
		c.storeFailed(w, r, "get effect", err)
		return
	}
	if e == nil {
		c.fail(w, r, http.StatusNotFound, "No effect "+strconv.FormatInt(id, 10)+".")
		return
	}
	writeRaw(w, "effect-"+strconv.FormatInt(id, 10)+"-request.json", e.Request)
}
