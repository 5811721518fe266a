package console

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/hookledger/hookledger/internal/bodyview"
	"github.com/hookledger/hookledger/internal/flow"
)

// forwardView is a forward flow's request as the effect page shows it: the
// event's body, stored as base64 so that every byte survives any driver,
// shown as text when it is UTF-8, beside its method and content type.
type forwardView struct {
	Method, Path, ContentType string
	// Body is the decoded body; Binary says it is not UTF-8 text, so the
	// page shows the stored request (with the base64) instead.
	Body   shownBody
	Binary bool
}

// newForwardView reads a stored request that carries its body as base64
// (a forward's), and returns nil for any other request, which the page
// shows as stored.
func newForwardView(id int64, stored []byte) *forwardView {
	var req flow.Request
	if err := json.Unmarshal(stored, &req); err != nil || len(req.BodyBase64) == 0 || len(req.Body) > 0 {
		return nil
	}
	v := &forwardView{Method: req.Method, Path: req.Path, ContentType: req.Headers["Content-Type"], Binary: !utf8.Valid(req.BodyBase64)}
	v.Body = shownBody{View: bodyview.Render(req.BodyBase64), Label: "Request body", Raw: requestBodyLink(id)}
	return v
}

func requestBodyLink(id int64) string {
	return "/effects/" + strconv.FormatInt(id, 10) + "/request/body"
}

// rawEffectRequestBody serves GET /effects/{id}/request/body: a forward's
// body as it is sent, byte for byte.
func (c *Console) rawEffectRequestBody(w http.ResponseWriter, r *http.Request) {
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
	var req flow.Request
	if e == nil || json.Unmarshal(e.Request, &req) != nil || len(req.BodyBase64) == 0 {
		c.fail(w, r, http.StatusNotFound, "No forwarded body for effect "+strconv.FormatInt(id, 10)+".")
		return
	}
	writeRaw(w, "effect-"+strconv.FormatInt(id, 10)+"-body", req.BodyBase64)
}
