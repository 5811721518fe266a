// Package envelope extracts the identities hookledger needs from a verified
// webhook body: the sender's event id, the event type, the business entity,
// the account (tenant) and the occurrence time, one Event per event in the
// body (HubSpot and Klaviyo batch several events in one request).
//
// Each kind's default field paths, unit of time and batch shape come from
// the registry of sender kinds (package senderkind), following the
// sender's documented payload, and so do the identity rules that paths
// cannot express (HubSpot's composite event id, Twilio's form contract):
// functions the kind carries, which this package runs through a
// senderkind.Doc without knowing which kind it reads. Paths overrides any
// path, and a rule for the same field. Bodies are JSON, except
// for a kind whose sender posts forms (Twilio), whose parameters are read
// as an object of strings. A body that breaks the sender's
// contract yields a *MalformedError naming the field, which the receiver
// returns as HTTP 400. Numeric ids keep their exact digits (json.Number), and
// an event without an occurrence time gets the zero time, never the receipt
// time, so the two are never confused (OR03).
package envelope
