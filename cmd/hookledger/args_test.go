package main

import "testing"

// TestVerbsRefuseStrayArgumentsAndFormats pins, verb by verb, the usage
// error for a positional argument the verb does not take and for a
// --format other than text or json: exit 2 and the exact message, before
// any config is read.
func TestVerbsRefuseStrayArgumentsAndFormats(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "stray"}, "hookledger check: unexpected argument \"stray\"\n"},
		{[]string{"check", "--format", "xml"}, "hookledger check: --format \"xml\": want text or json\n"},
		{[]string{"status", "stray"}, "hookledger status: unexpected argument \"stray\"\n"},
		{[]string{"status", "--format", "xml"}, "hookledger status: --format \"xml\": want text or json\n"},
		{[]string{"replay", "stray"}, "hookledger replay: unexpected argument \"stray\"\n"},
		{[]string{"replay", "--format", "xml"}, "hookledger replay: --format \"xml\": want text or json\n"},
		{[]string{"events", "resolve", "stray"}, "hookledger events resolve: unexpected argument \"stray\"\n"},
		{[]string{"events", "resolve", "--format", "xml"}, "hookledger events resolve: --format \"xml\": want text or json\n"},
		{[]string{"exceptions", "stray"}, "hookledger exceptions: unexpected argument \"stray\"\n"},
		{[]string{"exceptions", "--format", "xml"}, "hookledger exceptions: --format \"xml\": want text or json\n"},
		{[]string{"effects", "list", "stray"}, "hookledger effects list: unexpected argument \"stray\"\n"},
		{[]string{"effects", "list", "--format", "xml"}, "hookledger effects: --format \"xml\": want text or json\n"},
		{[]string{"validate", "--format", "xml", "1"}, "hookledger validate: --format \"xml\": want text or json\n"},
		{[]string{"demo", "stray"}, "hookledger demo: unexpected argument \"stray\"\n"},
		{[]string{"serve", "stray"}, "hookledger serve: unexpected argument \"stray\"\n"},
		{[]string{"migrate", "stray"}, "hookledger migrate: unexpected argument \"stray\"\n"},
		{[]string{"version", "stray"}, "hookledger version: unexpected argument \"stray\"\n"},
	} {
		code, out, errOut := run(t, "", nil, c.args...)
		if code != exitUsage || out != "" || errOut != c.want {
			t.Errorf("hookledger %q: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, errOut, exitUsage, c.want)
		}
	}
}
