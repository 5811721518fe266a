package senderkind

import (
	"net"
	"net/url"
	"strings"
	"time"
)

// requirePublicURL is the config check of a kind whose sender signs the
// URL it calls (Twilio, Square). Without public_url the receiver would
// have to rebuild that URL from the request it sees, which behind a proxy
// or load balancer is not the one the sender signed, so every delivery
// would fail; the source is refused at load instead.
//
// The URL must be absolute and https: both senders call https endpoints
// in production (Square accepts no other notification URL), and a URL the
// operator typed as http by mistake would refuse every delivery. http is
// allowed for a loopback host only, for trying a source locally with
// `hookledger send`.
func requirePublicURL(s Source, sender string) []Problem {
	if s.PublicURL == "" {
		return []Problem{{Field: "public_url", Msg: sender + " signs the URL it calls: set public_url to the URL configured at " + sender + ", exactly (scheme, host, path, trailing slash, query)"}}
	}
	u, err := url.Parse(s.PublicURL)
	if err != nil || u.Host == "" {
		// The config's own check names a URL that is not absolute.
		return nil
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && loopback(u.Hostname()):
	default:
		return []Problem{{Field: "public_url", Msg: "public_url must be an https URL (http only for a loopback host, for local tests)"}}
	}
	if u.Fragment != "" {
		// Twilio's connection overrides (#rt=...) live in the fragment,
		// which is not part of the signed URL and never reaches the
		// receiver.
		return []Problem{{Field: "public_url", Msg: "public_url must not have a fragment (#...): the sender does not sign it; configure connection overrides at the sender only"}}
	}
	return nil
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// untimed refuses a configured tolerance for a sender that signs no
// timestamp.
func untimed(sender string) func(Source) []Problem {
	return func(s Source) []Problem {
		if s.Tolerance != nil {
			return []Problem{{Field: "tolerance", Msg: sender + " signs no timestamp, so no tolerance applies"}}
		}
		return nil
	}
}

// timedCheck bounds a configured tolerance of a timestamped sender: zero
// would fall back to the default silently, and a window longer than an
// hour keeps a captured request replayable for that long.
func timedCheck(sender string) func(Source) []Problem {
	return func(s Source) []Problem {
		switch {
		case s.Tolerance == nil:
			return nil
		case *s.Tolerance == 0:
			return []Problem{{Field: "tolerance", Msg: "a tolerance of 0 would fall back to the default; remove it or use a positive value such as 5m"}}
		case *s.Tolerance > maxTolerance:
			return []Problem{{Field: "tolerance", Msg: "a " + sender + " tolerance above 1h keeps a captured request replayable for that long; use at most 1h"}}
		}
		return nil
	}
}

// maxTolerance is the widest tolerance a timestamped kind accepts.
const maxTolerance = time.Hour
