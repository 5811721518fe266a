//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/testdep"
)

// exampleOutcome is what an example's README promises once its commands
// have run: the effects by "destination state", the calls the
// destination received by path, and event dispositions by
// "source/event_id".
type exampleOutcome struct {
	config string // the example's config, relative to the repository root
	// effects counts the effects by destination and state, every effect
	// of the store included.
	effects map[string]int
	calls   map[string]int
	events  map[string]string
}

// exampleOutcomes lists every directory of examples/: a new example
// without an entry fails TestExamples.
var exampleOutcomes = map[string]exampleOutcome{
	"first-flow": {
		config:  "examples/first-flow/hookledger.yaml",
		effects: map[string]int{"dev done": 1, "dev dead": 1},
		calls:   map[string]int{"/orders/ord_1": 1, "/orders/ord_2": 1},
		events:  map[string]string{"shop/ev_first_1": "applied", "shop/ev_first_2": "applied", "shop/ev_first_3": "unrouted"},
	},
	"stripe-to-crm": {
		config:  "examples/stripe-to-crm/hookledger.yaml",
		effects: map[string]int{"crm done": 2, "crm dead": 1},
		calls:   map[string]int{"/crm/deals/sub_1": 1, "/crm/deals/sub_2": 1, "/crm/deals/sub_3": 3},
		events:  map[string]string{"stripe/evt_crm_1": "applied", "stripe/evt_crm_2": "applied", "stripe/evt_crm_3": "applied"},
	},
	"publishing": {
		config:  "examples/publishing/hookledger.yaml",
		effects: map[string]int{"endpoint:partner done": 2, "endpoint:old-erp dead": 2},
		calls:   map[string]int{"/partner/webhooks": 2, "/old-erp/webhooks": 1},
	},
}

// The ports the READMEs use; the test rewrites them to free ones in the
// commands and in every file of the example.
const (
	examplePort     = ":8080" // hookledger serve
	exampleDestPort = ":9000" // hookledger dev-destination
)

// TestExamples runs the shell commands of every examples/*/README.md
// exactly as written, but for the ports, from a directory laid out like
// the repository (bin/hookledger, examples/NAME), and checks the outcome
// the README describes. serve and dev-destination run in the background
// and are stopped by their PID at the end.
func TestExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs every example")
	}
	for _, prog := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(prog); err != nil {
			testdep.Missing(t, "%s not found on PATH: the examples' commands are not run", prog)
		}
	}
	readmes, err := filepath.Glob(filepath.Join("..", "..", "examples", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(readmes) < 3 {
		t.Fatalf("%d examples, want at least 3", len(readmes))
	}
	names := map[string]bool{}
	for _, r := range readmes {
		names[filepath.Base(filepath.Dir(r))] = true
	}
	for name := range exampleOutcomes {
		if !names[name] {
			t.Errorf("examples/%s/README.md is missing", name)
		}
	}
	bin := buildBinary(t)
	for _, r := range readmes {
		name := filepath.Base(filepath.Dir(r))
		want, ok := exampleOutcomes[name]
		if !ok {
			t.Errorf("examples/%s has no expected outcome in exampleOutcomes", name)
			continue
		}
		t.Run(name, func(t *testing.T) { runExample(t, bin, filepath.Dir(r), want) })
	}
}

// exampleCommands are the commands of a README's ```sh blocks, one per
// logical line (backslash continuations joined).
func exampleCommands(readme string) []string {
	var cmds []string
	var cur strings.Builder
	in := false
	for _, line := range strings.Split(readme, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && trimmed == "```sh":
			in = true
		case in && trimmed == "```":
			in = false
		case in:
			if strings.HasSuffix(line, "\\") {
				cur.WriteString(strings.TrimSuffix(line, "\\"))
				continue
			}
			cur.WriteString(line)
			if c := strings.TrimSpace(cur.String()); c != "" && !strings.HasPrefix(c, "#") {
				cmds = append(cmds, c)
			}
			cur.Reset()
		}
	}
	return cmds
}

// background is a long-running command and the line it prints once it
// is ready.
var background = []struct {
	prefix string
	ready  *regexp.Regexp
}{
	{"bin/hookledger serve ", regexp.MustCompile(`msg="hookledger serving"`)},
	{"bin/hookledger dev-destination", regexp.MustCompile(`dev-destination listening on http://`)},
}

func runExample(t *testing.T, bin, dir string, want exampleOutcome) {
	root := t.TempDir()
	ps := freePorts(t, 2)
	port, destPort := ps[0], ps[1]
	ports := strings.NewReplacer(examplePort, ":"+port, exampleDestPort, ":"+destPort)
	rel, err := filepath.Rel(filepath.Join("..", ".."), dir)
	if err != nil {
		t.Fatal(err)
	}
	copyRewritten(t, dir, filepath.Join(root, rel), ports)
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(root, "bin", "hookledger")); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, rel, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := exampleCommands(string(readme))
	if len(cmds) == 0 {
		t.Fatal("the README has no ```sh commands")
	}
	// The variables a config reads with a demo default must take it, as
	// on a fresh machine.
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "HOOKLEDGER_") && !strings.HasSuffix(k, "_SECRET") {
			env = append(env, kv)
		}
	}
	var started []*exampleProc
	defer func() {
		for i := len(started) - 1; i >= 0; i-- {
			started[i].stop(t)
		}
	}()
	for _, c := range cmds {
		if p := startBackground(t, root, env, c); p != nil {
			started = append(started, p)
			continue
		}
		cmd := exec.Command("bash", "-o", "pipefail", "-c", c)
		cmd.Dir, cmd.Env = root, env
		out, err := cmd.CombinedOutput()
		t.Logf("$ %s\n%s", c, out)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
	}
	if len(started) == 0 {
		t.Fatal("the README starts no server")
	}
	checkExampleOutcome(t, root, env, port, destPort, want)
	for i := len(started) - 1; i >= 0; i-- {
		if code := started[i].stop(t); code != 0 {
			t.Errorf("%s: exit %d after SIGTERM, want 0\n%s", started[i].command, code, started[i].out.String())
		}
	}
	started = nil
}

// exampleProc is a background command of an example.
type exampleProc struct {
	command string
	cmd     *exec.Cmd
	out     *lockedBuffer
	done    chan struct{}
	once    sync.Once
	code    int
}

// startBackground starts c and waits until it is ready, when it is one
// of the long-running commands; else it returns nil.
func startBackground(t *testing.T, root string, env []string, c string) *exampleProc {
	t.Helper()
	for _, b := range background {
		if !strings.HasPrefix(c, b.prefix) {
			continue
		}
		// exec: the PID is the command's own, so SIGTERM reaches it.
		cmd := exec.Command("bash", "-c", "exec "+c)
		cmd.Dir, cmd.Env = root, env
		p := &exampleProc{command: c, cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = p.out, p.out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = cmd.Wait()
			p.code = cmd.ProcessState.ExitCode()
			close(p.done)
		}()
		deadline := time.Now().Add(60 * time.Second)
		for !b.ready.MatchString(p.out.String()) {
			select {
			case <-p.done:
				t.Fatalf("%s ended before it was ready (exit %d):\n%s", c, p.code, p.out.String())
			default:
			}
			if time.Now().After(deadline) {
				p.stop(t)
				t.Fatalf("%s not ready:\n%s", c, p.out.String())
			}
			time.Sleep(10 * time.Millisecond) // waiting for the process to start, not measuring time
		}
		t.Logf("$ %s &  (pid %d)", c, cmd.Process.Pid)
		return p
	}
	return nil
}

// stop sends SIGTERM to the process by its PID and returns its exit
// code; a process that does not stop in time is killed.
func (p *exampleProc) stop(t *testing.T) int {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("%s did not stop on SIGTERM", p.command)
		}
	})
	return p.code
}

// checkExampleOutcome waits until the example's store, destination and events
// show what the README promises (delivery and retries take a moment).
func checkExampleOutcome(t *testing.T, root string, env []string, port, destPort string, want exampleOutcome) {
	t.Helper()
	var got exampleOutcome
	deadline := time.Now().Add(60 * time.Second)
	for {
		got = readExampleOutcome(t, root, env, port, destPort, want)
		if fmt.Sprint(got.effects) == fmt.Sprint(want.effects) && fmt.Sprint(got.calls) == fmt.Sprint(want.calls) &&
			fmt.Sprint(got.events) == fmt.Sprint(want.events) {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // waiting for delivery, not measuring time
	}
	t.Fatalf("outcome:\n effects %v\n calls   %v\n events  %v\nwant:\n effects %v\n calls   %v\n events  %v",
		got.effects, got.calls, got.events, want.effects, want.calls, want.events)
}

func readExampleOutcome(t *testing.T, root string, env []string, port, destPort string, want exampleOutcome) exampleOutcome {
	t.Helper()
	got := exampleOutcome{effects: map[string]int{}, calls: map[string]int{}}
	cmd := exec.Command(filepath.Join(root, "bin", "hookledger"), "effects", "list", "--config", want.config,
		"--state", "any", "--format", "json")
	cmd.Dir, cmd.Env = root, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("effects list: %v\n%s", err, stderr.String())
	}
	var effects struct {
		Effects []struct{ Destination, State string }
	}
	if err := json.Unmarshal(out, &effects); err != nil {
		t.Fatalf("effects list --format json: %v\n%s", err, out)
	}
	for _, e := range effects.Effects {
		got.effects[e.Destination+" "+e.State]++
	}
	var calls struct{ Calls []struct{ Path string } }
	getJSON(t, "http://127.0.0.1:"+destPort+"/_dev/calls", "", &calls)
	for _, c := range calls.Calls {
		got.calls[c.Path]++
	}
	if want.events != nil {
		got.events = map[string]string{}
		keys := make([]string, 0, len(want.events))
		for k := range want.events {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			source, id, _ := strings.Cut(k, "/")
			var events struct {
				Events []struct{ Disposition string }
			}
			getJSON(t, "http://127.0.0.1:"+port+"/api/v1/events?source="+source+"&event_id="+id, "demo-admin-token-change-me", &events)
			if len(events.Events) == 1 {
				got.events[k] = events.Events[0].Disposition
			}
		}
	}
	return got
}

func getJSON(t *testing.T, url, token string, v any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// copyRewritten copies the example's files with the ports rewritten.
func copyRewritten(t *testing.T, from, to string, r *strings.Replacer) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			copyRewritten(t, filepath.Join(from, e.Name()), filepath.Join(to, e.Name()), r)
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), []byte(r.Replace(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// freePorts is n distinct loopback ports free a moment ago. Every
// listener stays open until all n are picked: with each closed before
// the next pick, the kernel once handed one port out twice on a busy
// machine, and an example's server found its destination's port taken.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	ports := make([]string, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports[i] = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// The parser takes the ```sh blocks only, joins continued lines and
// skips comments, so the test runs what a reader would paste.
func TestExampleCommands(t *testing.T) {
	readme := "text\n```sh\n# a comment\nbin/hookledger serve --config x.yaml\n\ncurl -s \\\n  -d '{}' \\\n  localhost:8080/x\n```\n" +
		"```text\nnot run\n```\n```yaml\nlisten: x\n```\n```sh\necho hi   # said\n```\n"
	got := exampleCommands(readme)
	want := []string{"bin/hookledger serve --config x.yaml", "curl -s   -d '{}'   localhost:8080/x", "echo hi   # said"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("commands %q, want %q", got, want)
	}
}
