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
// would add, for the sign command and for tests.
package signature
