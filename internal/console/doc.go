// Package console serves the operator console: server-rendered pages at /
// on the serve listener that show what the store knows (events with their
// dispositions, entities in business order, effects with their attempt
// timelines, destinations' and sources' recent health) and let an
// operator repair the exception queue (retry, resolve, assign, bulk retry)
// and replay stored events.
//
// The console is behind admin.token like the admin API, but a browser
// cannot send a bearer token, so the token is typed once on the login page
// and traded for a session cookie (HttpOnly, SameSite=Strict, Secure over
// TLS) that names a server-side session with a fixed lifetime; a new login
// ends the browser's earlier session. Wrong tokens are counted per client
// address with the admin API's (package authlimit), and the address to
// return to after login is judged as a browser would follow it. Every
// state-changing request carries the session's CSRF token in a form field
// or a header, compared in constant time. Without the cookie a page
// redirects to the login page and an asset or an htmx fragment answers 401,
// so nothing but the login page reaches an unauthenticated client. With no
// admin.token the console is off and answers 404, like the API refuses
// every request.
//
// Templates and assets are embedded (embed.FS): html/template escapes
// everything the store holds, so an event body with <script> is shown as
// text. A stored body (a delivery's, a projection's state, an effect's
// request) is shown through package bodyview, pretty-printed or cut within
// a fixed size, with a link to its raw bytes, which are served apart as an
// attachment never rendered; lists read no bodies, an event page reads five
// deliveries' first 64 KiB at a time, and no page is built past
// maxPageBytes (body.go), so a request's memory does not follow what the
// store holds. htmx and uPlot are checked in under assets/vendor with their
// licences; there is no build step. The pages work without JavaScript;
// htmx only refreshes lists and the overview's numbers in place, and
// assets/overview.js draws the overview's sparklines and trend charts with
// uPlot from /overview/series.json. A Content-Security-Policy allows
// scripts and styles from the console itself only.
//
// A bulk retry and a replay show a dry run first, then run on the server
// as a job (jobs.go) whose page polls its progress: the job's context is
// the console's, so Close stops every job between two steps, and each
// records how far it got in the audit trail. The server attaches what the
// store does not hold (the flow engine for replays, the delivery worker's
// token buckets, the metrics registry) with Attach.
//
// The overview (overview.go) measures the outcome signals when asked,
// with the registry and thresholds given by WithSignals, words each card
// and links every number to the list behind it as the signal's registry
// entry says, down to an audit list (audit.go) for the signals that count
// audit rows.
//
// The console reads and operates through the store contract (the Store
// interface here is the part it uses) and reads list filters with the
// admin API's parsers, so a console URL and an API query take the same
// parameters. docs/console.md describes the pages.
package console
