package signature

import (
	"crypto/hmac"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KindSlack is the scheme's name, as Options.Kind takes it.
const KindSlack = "slack"

// slackScheme is Slack's X-Slack-Signature over "v0:{ts}:{body}".
var slackScheme = schemeDef{
	name: KindSlack, tolerance: SlackDefaultTolerance,
	build: func(o Options, tol time.Duration) (Scheme, error) { return newSlack(o.Secrets, tol), nil },
}

// Slack request-signing headers.
const (
	// slackSignatureHeader carries "v0=" and the hex HMAC-SHA256 of
	// "v0:{timestamp}:{body}", keyed with the app's signing secret.
	slackSignatureHeader = "X-Slack-Signature"
	// SlackTimestampHeader is the signing time in unix seconds.
	SlackTimestampHeader = "X-Slack-Request-Timestamp"
	// SlackRetryNumHeader counts Slack's retries (1, 2, 3); absent on the
	// first attempt. Transport data only, never part of an identity.
	SlackRetryNumHeader = "X-Slack-Retry-Num"
	// SlackRetryReasonHeader says why Slack retried (http_timeout ...).
	SlackRetryReasonHeader = "X-Slack-Retry-Reason"
)

// SlackDefaultTolerance is the window Slack's guide and its Bolt
// libraries use for X-Slack-Request-Timestamp.
const SlackDefaultTolerance = 5 * time.Minute

// slackVersion is the only signature version Slack has published.
const slackVersion = "v0"

// slack verifies Slack's v0 request signatures.
type slack struct {
	secrets [][]byte
	tol     time.Duration
}

func newSlack(secrets []string, tol time.Duration) *slack {
	if tol == 0 {
		tol = SlackDefaultTolerance
	}
	return &slack{secrets: secretKeys(secrets), tol: tol}
}

// parseSlackSignature decodes an X-Slack-Signature value: "v0=" followed by
// hex. Any other version is refused rather than skipped, since Slack sends
// exactly one signature per request.
func parseSlackSignature(v string) ([]byte, error) {
	ver, hx, ok := strings.Cut(v, "=")
	if !ok {
		return nil, failf(reasonMalformed, "slack: %s has no version= prefix", slackSignatureHeader)
	}
	if ver != slackVersion {
		return nil, failf(ReasonMissing, "slack: %s is not a v0 signature", slackSignatureHeader)
	}
	b, err := hex.DecodeString(hx)
	if err != nil || len(b) == 0 {
		return nil, failf(reasonMalformed, "slack: %s v0 value is not hex", slackSignatureHeader)
	}
	return b, nil
}

// parseSlackTimestamp reads X-Slack-Request-Timestamp: unix seconds, ASCII
// digits only (no sign, no fraction), as Slack sends it. The raw text is
// what Slack signs, so it is returned alongside the time.
func parseSlackTimestamp(v string) (time.Time, error) {
	if !isDigits(v) || len(v) > 12 {
		return time.Time{}, failf(reasonTimestamp, "slack: %s is not a unix time in seconds", SlackTimestampHeader)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, failf(reasonTimestamp, "slack: %s is not a unix time in seconds", SlackTimestampHeader)
	}
	return time.Unix(n, 0), nil
}

func slackBase(ts string, body []byte) [][]byte {
	return [][]byte{[]byte(slackVersion + ":" + ts + ":"), body}
}

func (s *slack) Verify(req *Request, now time.Time) error {
	const sc = "slack"
	sigRaw, ok, herr := header(req.Header, slackSignatureHeader, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", sc, slackSignatureHeader)
	}
	tsRaw, ok, herr := header(req.Header, SlackTimestampHeader, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", sc, SlackTimestampHeader)
	}
	got, err := parseSlackSignature(sigRaw)
	if err != nil {
		return err
	}
	signed, err := parseSlackTimestamp(tsRaw)
	if err != nil {
		return err
	}
	matched := false
	for _, key := range s.secrets {
		if hmac.Equal(hmacSHA256(key, slackBase(tsRaw, req.Body)...), got) {
			matched = true
		}
	}
	if !matched {
		return failf(reasonMismatch, "%s: %s matches no configured signing secret", sc, slackSignatureHeader)
	}
	// After the signature, as for the other schemes, so that an authentic
	// but stale request reads as a clock or replay problem.
	if e := checkWindow(sc, signed, now, s.tol); e != nil {
		return e
	}
	return nil
}

func (s *slack) Sign(req *Request, now time.Time, _ string) (http.Header, error) {
	ts := strconv.FormatInt(now.Unix(), 10)
	h := http.Header{}
	h.Set(SlackTimestampHeader, ts)
	h.Set(slackSignatureHeader, slackVersion+"="+hex.EncodeToString(hmacSHA256(s.secrets[0], slackBase(ts, req.Body)...)))
	return h, nil
}
