package signature

import (
	"net/http"
	"time"
)

// KindGitHub is the scheme's name, as Options.Kind takes it.
const KindGitHub = "github"

// githubScheme is GitHub's X-Hub-Signature-256; GitHub signs no timestamp.
var githubScheme = schemeDef{
	name: KindGitHub,
	build: func(o Options, _ time.Duration) (Scheme, error) {
		if err := noTolerance(o); err != nil {
			return nil, err
		}
		g, err := newGitHub(o.Secrets)
		if err != nil {
			return nil, err
		}
		return g, nil
	},
}

// GitHub webhook headers.
const (
	// gitHubSignatureHeader carries "sha256=" and the hex HMAC-SHA256 of
	// the raw body, keyed with the webhook secret.
	gitHubSignatureHeader = "X-Hub-Signature-256"
	// gitHubSHA1SignatureHeader is the legacy HMAC-SHA1 signature GitHub
	// still sends next to the SHA-256 one. It is never accepted: SHA-1 is
	// only kept by GitHub for old receivers, and accepting it would let a
	// request choose the weaker of two schemes.
	gitHubSHA1SignatureHeader = "X-Hub-Signature"
	// GitHubDeliveryHeader is a GUID GitHub generates per event; a
	// redelivery (manual or through the API) carries the same value.
	GitHubDeliveryHeader = "X-GitHub-Delivery"
	// GitHubEventHeader names the event type (push, pull_request, ...).
	GitHubEventHeader = "X-GitHub-Event"
)

// github is the generic hmac scheme pinned to GitHub's parameters
// (X-Hub-Signature-256, prefix "sha256=", hex, body only, no timestamp):
// the generic scheme already implements exactly this construction, so only
// the error texts and the SHA-1 hint are GitHub's own. GitHub signs no
// timestamp, so no tolerance applies; replays are caught by the event
// identity (X-GitHub-Delivery) in the inbox.
type github struct{ h *hmacScheme }

func newGitHub(secrets []string) (*github, error) {
	h, err := newHMAC(&HMACOptions{Header: gitHubSignatureHeader, Prefix: "sha256="}, secrets, 0, 0)
	if err != nil {
		return nil, err
	}
	return &github{h: h}, nil
}

func (g *github) Verify(req *Request, now time.Time) error {
	err := g.h.Verify(req, now)
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok && e.Reason == ReasonMissing {
		if _, sha1, _ := header(req.Header, gitHubSHA1SignatureHeader, "github"); sha1 {
			return failf(ReasonMissing, "github: %s header is missing; only %s (HMAC-SHA1) was sent, and SHA-1 is never accepted", gitHubSignatureHeader, gitHubSHA1SignatureHeader)
		}
	}
	return renamed("github", err)
}

// Sign writes only X-Hub-Signature-256: the SHA-1 header is not produced,
// so a receiver tested against our signer cannot come to depend on it.
func (g *github) Sign(req *Request, now time.Time, eventID string) (http.Header, error) {
	return g.h.Sign(req, now, eventID)
}
