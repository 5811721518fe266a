package signature

import (
	"encoding/base64"
	"net/http"
	"strings"
	"time"
)

// KindPipedrive is the scheme's name, as Options.Kind takes it.
const KindPipedrive = "pipedrive"

// pipedriveScheme is Pipedrive's HTTP basic auth: nothing is signed, so no
// tolerance applies.
var pipedriveScheme = schemeDef{
	name: KindPipedrive,
	build: func(o Options, _ time.Duration) (Scheme, error) {
		if o.Tolerance != 0 {
			return nil, optErr("tolerance", "pipedrive sends no timestamp, so no tolerance applies")
		}
		p, err := newPipedrive(o.Secrets)
		if err != nil {
			return nil, err
		}
		return p, nil
	},
}

// pipedrive checks HTTP basic auth. Pipedrive signs nothing; the only
// authentication a webhook can carry is the optional user and password set
// on the webhook, so the body is protected by TLS alone. Each secret is a
// "user:password" pair.
type pipedrive struct {
	creds []basicCred
}

type basicCred struct{ user, pass string }

func newPipedrive(secrets []string) (*pipedrive, error) {
	p := &pipedrive{}
	for i, s := range secrets {
		u, pw, ok := strings.Cut(s, ":")
		if !ok {
			return nil, optErr("secrets", "pipedrive secret %d must be user:password", i+1)
		}
		if u == "" || pw == "" {
			return nil, optErr("secrets", "pipedrive secret %d needs both a user and a password", i+1)
		}
		p.creds = append(p.creds, basicCred{u, pw})
	}
	return p, nil
}

func (p *pipedrive) Verify(req *Request, _ time.Time) error {
	const sc = "pipedrive"
	v, ok, herr := header(req.Header, "Authorization", sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: Authorization header is missing (configure basic auth on the Pipedrive webhook)", sc)
	}
	scheme, b64, found := strings.Cut(v, " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return failf(reasonMalformed, "%s: Authorization header is not Basic", sc)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return failf(reasonMalformed, "%s: Authorization Basic credentials are not base64", sc)
	}
	user, pass, found := strings.Cut(string(raw), ":")
	if !found {
		return failf(reasonMalformed, "%s: Authorization Basic credentials have no user:password form", sc)
	}
	matched := false
	for _, c := range p.creds {
		// Both parts are always compared, so timing does not reveal which
		// one was wrong.
		u := equalSecret(user, c.user)
		pw := equalSecret(pass, c.pass)
		if u && pw {
			matched = true
		}
	}
	if !matched {
		return failf(reasonMismatch, "%s: credentials match no configured user and password", sc)
	}
	return nil
}

func (p *pipedrive) Sign(_ *Request, _ time.Time, _ string) (http.Header, error) {
	c := p.creds[0]
	h := http.Header{}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(c.user+":"+c.pass)))
	return h, nil
}
