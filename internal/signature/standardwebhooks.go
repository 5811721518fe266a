package signature

import (
	"crypto/ed25519"
	"crypto/hmac"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KindStandardWebhooks is the scheme's name, as Options.Kind takes it.
const KindStandardWebhooks = "standard-webhooks"

// standardWebhooksScheme is the Standard Webhooks signature; its reference
// libraries accept a timestamp up to five minutes old.
var standardWebhooksScheme = schemeDef{
	name: KindStandardWebhooks, tolerance: 5 * time.Minute,
	build: func(o Options, tol time.Duration) (Scheme, error) {
		s, err := newStandardWebhooks(o.Secrets, tol)
		if err != nil {
			return nil, err
		}
		return s, nil
	},
}

// Standard Webhooks headers.
const (
	WebhookIDHeader        = "webhook-id"
	WebhookTimestampHeader = "webhook-timestamp"
	WebhookSignatureHeader = "webhook-signature"
)

// The same three headers under the names Svix-powered senders use by
// default. Svix documents the webhook- names as a white-label option of the
// same scheme, and its own libraries accept either set, so a source of kind
// standard-webhooks accepts both.
const (
	svixIDHeader        = "svix-id"
	svixTimestampHeader = "svix-timestamp"
	svixSignatureHeader = "svix-signature"
)

// HeaderSet names the three headers of one Standard Webhooks request.
type HeaderSet struct {
	Name                     string // "webhook" or "svix"
	ID, Timestamp, Signature string
}

// The Standard Webhooks header sets: the specification's own names, and
// Svix's. Constants in all but name; HeaderSets hands out copies.
var (
	webhookSet = HeaderSet{Name: "webhook", ID: WebhookIDHeader, Timestamp: WebhookTimestampHeader, Signature: WebhookSignatureHeader}
	svixSet    = HeaderSet{Name: "svix", ID: svixIDHeader, Timestamp: svixTimestampHeader, Signature: svixSignatureHeader}
)

// HeaderSets returns the header sets a standard-webhooks request may use,
// the specification's own first, in a fresh slice.
func HeaderSets() []HeaderSet { return []HeaderSet{webhookSet, svixSet} }

func (hs HeaderSet) names() []string { return []string{hs.ID, hs.Timestamp, hs.Signature} }

// Rename returns h with the headers of the webhook set written under the
// names of hs; other headers are copied as they are. Sign produces the
// webhook set, and the sign command renames it for a sender that uses svix
// names.
func (hs HeaderSet) Rename(h http.Header) http.Header {
	out := http.Header{}
	for k, vs := range h {
		switch http.CanonicalHeaderKey(k) {
		case http.CanonicalHeaderKey(WebhookIDHeader):
			k = hs.ID
		case http.CanonicalHeaderKey(WebhookTimestampHeader):
			k = hs.Timestamp
		case http.CanonicalHeaderKey(WebhookSignatureHeader):
			k = hs.Signature
		}
		for _, v := range vs {
			out.Add(k, v)
		}
	}
	return out
}

// requestHeaderSet tells which header set a request uses: the svix set when
// any svix- header is present and no webhook- one, else the webhook set
// (so a request with neither is reported missing under the specification's
// names). A request that carries headers of both sets is refused: which id,
// timestamp and signature belong together is then a guess, and a sender
// uses one set for a whole request. The refusal is a verification failure
// (401 at the receiver) because it is decided before the signature could be
// checked, when nothing about the request is authenticated yet.
func requestHeaderSet(h http.Header) (HeaderSet, error) {
	w := presentHeader(h, webhookSet)
	s := presentHeader(h, svixSet)
	switch {
	case w != "" && s != "":
		return HeaderSet{}, failf(reasonMalformed, "standard-webhooks: the request mixes two header sets (%s with %s); send either webhook-id, webhook-timestamp and webhook-signature, or svix-id, svix-timestamp and svix-signature", w, s)
	case s != "":
		return svixSet, nil
	}
	return webhookSet, nil
}

// presentHeader returns the first header of hs that the request carries,
// or "".
func presentHeader(h http.Header, hs HeaderSet) string {
	for _, n := range hs.names() {
		if len(h.Values(n)) > 0 {
			return n
		}
	}
	return ""
}

// Secret prefixes defined by the Standard Webhooks specification. whsk_ is
// accepted so that the sign command and tests can produce v1a signatures; a
// receiver normally holds only whpk_ public keys.
const (
	prefixSymmetric  = "whsec_"
	prefixPublicKey  = "whpk_"
	prefixPrivateKey = "whsk_"
)

// Symmetric secret sizes required by the specification.
const (
	minSymmetricKey = 24
	maxSymmetricKey = 64
)

// standardWebhooks verifies v1 (HMAC-SHA256 over "<id>.<timestamp>.<body>"
// with the base64-decoded whsec_ key, base64 encoded) and v1a (ed25519 over
// the same bytes).
type standardWebhooks struct {
	hmacKeys [][]byte
	pubKeys  []ed25519.PublicKey
	// signers in configuration order: a whsec_ key (hmac) or a whsk_ key.
	signers []swSigner
	tol     time.Duration
	// onCrypto, set only by tests, is called once per HMAC computed or
	// ed25519 signature checked, so a test can count the work a request
	// costs instead of timing it.
	onCrypto func()
}

type swSigner struct {
	hmacKey []byte
	edKey   ed25519.PrivateKey
}

func newStandardWebhooks(secrets []string, tol time.Duration) (*standardWebhooks, error) {
	s := &standardWebhooks{tol: tol}
	for i, sec := range secrets {
		n := i + 1
		switch {
		case strings.HasPrefix(sec, prefixSymmetric):
			key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, prefixSymmetric))
			if err != nil {
				return nil, optErr("secrets", "standard-webhooks secret %d: the part after whsec_ is not valid base64", n)
			}
			if len(key) < minSymmetricKey || len(key) > maxSymmetricKey {
				return nil, optErr("secrets", "standard-webhooks secret %d decodes to %d bytes; the specification requires %d to %d", n, len(key), minSymmetricKey, maxSymmetricKey)
			}
			s.hmacKeys = append(s.hmacKeys, key)
			s.signers = append(s.signers, swSigner{hmacKey: key})
		case strings.HasPrefix(sec, prefixPublicKey):
			key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, prefixPublicKey))
			if err != nil {
				return nil, optErr("secrets", "standard-webhooks secret %d: the part after whpk_ is not valid base64", n)
			}
			if len(key) != ed25519.PublicKeySize {
				return nil, optErr("secrets", "standard-webhooks secret %d: a whpk_ key must decode to %d bytes, got %d", n, ed25519.PublicKeySize, len(key))
			}
			s.pubKeys = append(s.pubKeys, ed25519.PublicKey(key))
		case strings.HasPrefix(sec, prefixPrivateKey):
			raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, prefixPrivateKey))
			if err != nil {
				return nil, optErr("secrets", "standard-webhooks secret %d: the part after whsk_ is not valid base64", n)
			}
			var priv ed25519.PrivateKey
			switch len(raw) {
			case ed25519.SeedSize:
				priv = ed25519.NewKeyFromSeed(raw)
			case ed25519.PrivateKeySize:
				priv = ed25519.PrivateKey(raw)
			default:
				return nil, optErr("secrets", "standard-webhooks secret %d: a whsk_ key must decode to %d (seed) or %d bytes, got %d", n, ed25519.SeedSize, ed25519.PrivateKeySize, len(raw))
			}
			s.pubKeys = append(s.pubKeys, priv.Public().(ed25519.PublicKey))
			s.signers = append(s.signers, swSigner{edKey: priv})
		default:
			return nil, optErr("secrets", "standard-webhooks secret %d must start with whsec_ or whpk_ (or whsk_ to sign v1a)", n)
		}
	}
	return s, nil
}

// webhookSignature is one entry of a webhook-signature list.
type webhookSignature struct {
	Version string // v1 or v1a; other versions are kept but never trusted
	Sig     []byte // decoded signature bytes
}

// parseWebhookSignatures parses a space-separated webhook-signature list
// of "<version>,<base64>" entries; name is the header's name as the request
// spelt it, for messages. Entries without a comma are skipped, as the
// reference libraries do; an entry of a known version whose signature is
// not base64 is an error, and so is a list of more than 16 entries of any
// kind (see maxSignatures).
func parseWebhookSignatures(v, name string) ([]webhookSignature, error) {
	// Counted before anything is decoded, so an oversized list costs one
	// scan of the header and nothing more.
	n := 0
	for range strings.FieldsSeq(v) {
		n++
	}
	if n > maxSignatures {
		return nil, failf(reasonMalformed, "standard-webhooks: %s holds %d entries; at most %d are accepted", name, n, maxSignatures)
	}
	out := make([]webhookSignature, 0, n)
	for _, item := range strings.Fields(v) {
		ver, b64, ok := strings.Cut(item, ",")
		if !ok {
			continue
		}
		if ver != "v1" && ver != "v1a" {
			out = append(out, webhookSignature{Version: ver})
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, failf(reasonMalformed, "standard-webhooks: %s has a %s entry that is not base64", name, ver)
		}
		out = append(out, webhookSignature{Version: ver, Sig: sig})
	}
	return out, nil
}

func (s *standardWebhooks) Verify(req *Request, now time.Time) error {
	const scheme = "standard-webhooks"
	hs, err := requestHeaderSet(req.Header)
	if err != nil {
		return err
	}
	id, ok, herr := header(req.Header, hs.ID, scheme)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", scheme, hs.ID)
	}
	tsRaw, ok, herr := header(req.Header, hs.Timestamp, scheme)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", scheme, hs.Timestamp)
	}
	sigRaw, ok, herr := header(req.Header, hs.Signature, scheme)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", scheme, hs.Signature)
	}
	ts, perr := strconv.ParseInt(tsRaw, 10, 64)
	if perr != nil || ts < 0 {
		return failf(reasonTimestamp, "%s: %s is not a unix time in seconds", scheme, hs.Timestamp)
	}
	sigs, err := parseWebhookSignatures(sigRaw, hs.Signature)
	if err != nil {
		return err
	}
	content := signedContentSW(id, ts, req.Body)
	usable := false
	matched := false
	// macs holds each HMAC key's signature of content, computed at the
	// first v1 entry: the MAC depends only on the key and the request, so
	// every entry is compared against the same values and a list costs one
	// MAC per key however many entries it holds. ed25519 checks cannot be
	// shared between entries; the cap on the list bounds them.
	var macs [][]byte
	for _, sg := range sigs {
		switch sg.Version {
		case "v1":
			if len(s.hmacKeys) == 0 {
				continue
			}
			usable = true
			if macs == nil {
				macs = make([][]byte, len(s.hmacKeys))
				for i, key := range s.hmacKeys {
					macs[i] = s.mac(key, content)
				}
			}
			for _, want := range macs {
				if hmac.Equal(want, sg.Sig) {
					matched = true
				}
			}
		case "v1a":
			if len(s.pubKeys) == 0 {
				continue
			}
			usable = true
			for _, pk := range s.pubKeys {
				if len(sg.Sig) == ed25519.SignatureSize && s.verifyEd25519(pk, content, sg.Sig) {
					matched = true
				}
			}
		}
	}
	if !usable {
		return failf(ReasonMissing, "%s: %s holds no signature of a version this source's secrets verify (%s)", scheme, hs.Signature, s.versions())
	}
	if !matched {
		return failf(reasonMismatch, "%s: no signature matches any configured secret", scheme)
	}
	if e := checkWindow(scheme, time.Unix(ts, 0), now, s.tol); e != nil {
		return e
	}
	return nil
}

func (s *standardWebhooks) mac(key, content []byte) []byte {
	if s.onCrypto != nil {
		s.onCrypto()
	}
	return hmacSHA256(key, content)
}

func (s *standardWebhooks) verifyEd25519(pk ed25519.PublicKey, content, sig []byte) bool {
	if s.onCrypto != nil {
		s.onCrypto()
	}
	return ed25519.Verify(pk, content, sig)
}

func (s *standardWebhooks) versions() string {
	var v []string
	if len(s.hmacKeys) > 0 {
		v = append(v, "v1")
	}
	if len(s.pubKeys) > 0 {
		v = append(v, "v1a")
	}
	return strings.Join(v, ", ")
}

// signedContentSW is "<id>.<timestamp>.<body>". The timestamp is the parsed
// integer re-formatted, as the reference Go library does.
func signedContentSW(id string, ts int64, body []byte) []byte {
	b := make([]byte, 0, len(id)+len(body)+24)
	b = append(b, id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, '.')
	return append(b, body...)
}

// Sign signs with the first secret that can sign: a whsec_ key gives a v1
// entry, a whsk_ key a v1a entry. A whpk_ public key cannot sign.
func (s *standardWebhooks) Sign(req *Request, now time.Time, eventID string) (http.Header, error) {
	if eventID == "" {
		return nil, &OptionError{Field: "event-id", Msg: "standard-webhooks signs the webhook-id header, so an event id is required"}
	}
	if len(s.signers) == 0 {
		return nil, optErr("secrets", "standard-webhooks: no secret can sign; whpk_ keys only verify (configure a whsec_ or whsk_ secret)")
	}
	ts := now.Unix()
	content := signedContentSW(eventID, ts, req.Body)
	sg := s.signers[0]
	var entry string
	if sg.hmacKey != nil {
		entry = "v1," + base64.StdEncoding.EncodeToString(hmacSHA256(sg.hmacKey, content))
	} else {
		entry = "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(sg.edKey, content))
	}
	h := http.Header{}
	h.Set(WebhookIDHeader, eventID)
	h.Set(WebhookTimestampHeader, strconv.FormatInt(ts, 10))
	h.Set(WebhookSignatureHeader, entry)
	return h, nil
}

// SignWebhook signs id, ts and body with every key (whsec_ gives a v1
// entry, whsk_ a v1a entry) and returns the webhook-signature value, the
// entries space-separated in the keys' order: during a rotation a
// receiver that knows any one of the keys verifies the message.
func SignWebhook(keys []string, id string, ts time.Time, body []byte) (string, error) {
	s, err := newStandardWebhooks(keys, 0)
	if err != nil {
		return "", err
	}
	if len(s.signers) == 0 {
		return "", optErr("secrets", "no key can sign (whpk_ keys only verify)")
	}
	content := signedContentSW(id, ts.Unix(), body)
	entries := make([]string, 0, len(s.signers))
	for _, sg := range s.signers {
		if sg.hmacKey != nil {
			entries = append(entries, "v1,"+base64.StdEncoding.EncodeToString(hmacSHA256(sg.hmacKey, content)))
		} else {
			entries = append(entries, "v1a,"+base64.StdEncoding.EncodeToString(ed25519.Sign(sg.edKey, content)))
		}
	}
	return strings.Join(entries, " "), nil
}
