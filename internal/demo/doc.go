// Package demo runs hookledger's recovery dossier live, in one process:
// a real server (package server, SQLite in a directory of its own), a fake
// destination that misbehaves on cue, and a sender that posts signed
// webhooks which walk through every failure the dossier names (a duplicate
// delivery, a duplicate event, a late stale revision, a hang after the
// remote side effect, a 429 with Retry-After, a permanent 422, a hidden
// failure, a lost mail found by verification, a feedback loop, a missed
// deadline, a compensation that cannot run, a source API that is down).
//
// When the script ends every event disposition and each of the built-in
// outcome signals has something to show, and the console is ready to
// explore. The clock is real, so the demo shortens the durations a real
// config would use (a 20 s deadline instead of 30 min, verification 15 s
// after a mail instead of 5 min, retries of seconds); Speed divides them
// further for tests.
//
// Run is what `hookledger demo` calls; the tests and the screenshot test
// drive the same scenario through demoConfig and Destination.
//
// The same Destination, without the script, is what `hookledger
// dev-destination` serves for trying flows out (StartDevDestination): it
// records every call and answers 200, except where a Rule tells it to
// fail, so that a first flow can end one effect done and another dead.
package demo
