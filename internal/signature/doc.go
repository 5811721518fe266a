// Package signature checks that a webhook request was sent by the party that
// holds the source's secret, using exactly one pinned scheme per source.
//
// Every scheme works on the raw body bytes as received: a body that was parsed
// and re-serialised no longer matches its signature. A scheme never falls back
// to a weaker one when its own header is missing, comparisons are constant
// time, and no error text ever carries a secret or a signature value, so
// errors can be logged and returned to the sender as they are.
//
// Schemes are built with New from Options and are safe for concurrent use.
// Verify takes the time to check against as a parameter so that tolerance
// windows are tested with fixed clocks. Sign produces the headers the sender
// would add, for the sign command and for tests; a scheme whose sender signs
// inside the body (Mailgun) is a BodySigner instead.
//
// Each scheme's file declares its name, the default window of its signed
// timestamp, the options it takes and its constructor (a schemeDef), and
// the schemes list in verify.go holds them, so New, Kinds and
// DefaultTolerance switch on no name. A scheme is not a sender kind: the
// kinds a config names live in package senderkind, several may share one
// scheme, and this package never imports that one.
package signature
