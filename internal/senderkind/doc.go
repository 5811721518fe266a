// Package senderkind is the registry of sender kinds: everything hookledger
// knows about one kind of webhook sender (stripe, hubspot, standard-webhooks
// ...), described in one file per kind.
//
// A Kind says which signature scheme of package signature checks the sender's
// requests and which options it pins, where the event's identities are read
// (event id, type, entity, account, occurrence time and its unit) and how a
// body is split into events, the identity rules that paths cannot express
// (Rules: functions the kind's file declares, such as HubSpot's composite
// event id or Twilio's form contract), which request headers are kept
// beside the body as evidence, the tolerance a timestamped scheme defaults
// to, the kind's own config checks, its delivery contract in the vendor
// catalogue, what `hookledger sign` can produce for it, and its built-in
// samples (samples/<kind>/) with the function that fills them for
// `hookledger send`. envelope, receive, config, `lint --config`,
// `vendors`, `sign` and `send` read the kind from here, so no other package
// switches on a kind's name.
//
// # No global registration
//
// Builtin assembles the registry from each kind's constructor function
// (stripe(), hubspot() ...) every time it is called, and New checks any set
// of kinds a test wants to build instead. Nothing registers itself in an
// init function and a Registry has no method that changes it: a package
// variable that init functions fill is a global registry, whose contents
// depend on which packages happen to be linked in and which a test can
// change for every other test. A Registry is a value; whoever needs one
// builds it or is handed it.
//
// # Layering
//
// The registry imports signature (to build schemes) and vendors (for
// contracts); envelope imports the registry and runs each kind's Rules
// through a Doc, without knowing which kind it reads. signature never
// imports the registry: it names signature schemes, which several kinds may
// share (a kind can pin the generic hmac scheme's header), while the kind
// names users write in the config exist once, here.
//
// # Adding a sender kind
//
//  1. Add a file named after the kind, with its name constant and a
//     function returning its Kind: the scheme (an existing scheme of
//     package signature, with Pin for fixed options of the generic hmac
//     scheme; or a new scheme: its own file in package signature declaring
//     a schemeDef, listed in signature's schemes), the Identity (paths into
//     the body, or header:Name for a header; Form for a sender that posts
//     forms) with Rules for what paths cannot say, Keep, Tolerance, Check,
//     the Contract (or the name of a contract already in package vendors),
//     Sign, Sample with its file under samples/<kind>/ and Fill, and
//     Handshake for a sender whose set-up requests are answered rather than
//     stored.
//  2. Append that function to the list in Builtin, and its name to the
//     list TestBuiltinNames pins.
//  3. Add tests: a signature made or checked by the sender's own library
//     verifies through the kind, a tampered one fails, a retry of one event
//     keeps its identity and two events never share one.
//  4. Document the kind in docs/signatures.md with the evidence for its
//     identity and what its signature cannot prove.
//
// Nothing else changes: the config accepts the new name, the receiver
// verifies, extracts and keeps headers by it, `vendors`, `lint --config`,
// `sign` and `send` show and use it, and envelope's FuzzExtractEveryKind
// fuzzes it. mailgun.go is a kind added this way, on a scheme of its own.
package senderkind
