//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hookledger/hookledger/internal/testdep"
)

// makeRunConfig writes a config for make run that listens on a free port
// and keeps its database in the test's directory.
func makeRunConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	return writeFile(t, "run.yaml", fmt.Sprintf("listen: 127.0.0.1:0\nstore: sqlite:%s\n", filepath.Join(dir, "run.db")))
}

func needMake(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary through make")
	}
	for _, prog := range []string{"make", "bash", "go"} {
		if _, err := exec.LookPath(prog); err != nil {
			testdep.Missing(t, "%s not found on PATH: `make run` and `make demo` are not tested", prog)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// makeCommand is make with args, run as a user runs it from a shell: a
// top-level make. Under make test, the test process inherits make's own
// variables (MAKELEVEL, MAKEFLAGS), and a make started with them calls
// itself make[1] and reports its errors as "make[1]: ***", which the
// checks below would not see.
func makeCommand(args ...string) *exec.Cmd {
	cmd := exec.Command("make", args...)
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES":
		default:
			cmd.Env = append(cmd.Env, kv)
		}
	}
	return cmd
}

// openPTY returns a pseudo-terminal's master and its terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		testdep.Missing(t, "no pseudo-terminals (/dev/ptmx): %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

// Ctrl-C on the terminal of make run stops the server cleanly: make exits
// 0 and prints no error line.
func TestMakeRunCtrlCOnATerminal(t *testing.T) {
	root := needMake(t)
	master, tty := openPTY(t)
	defer master.Close()
	cmd := makeCommand("--no-print-directory", "-C", root, "run", "CONFIG="+makeRunConfig(t))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// A session of its own with the pseudo-terminal as its controlling
	// terminal, as a login shell would have.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	out := &lockedBuffer{}
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(out, master); close(copied) }()
	waitUntilOrExit(t, out, "hookledger serving", cmd)
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	err := cmd.Wait()
	<-copied
	if err != nil {
		t.Fatalf("make run after Ctrl-C: %v; want exit 0\n%s", err, out)
	}
	if s := out.String(); strings.Contains(s, "make: ***") || !strings.Contains(s, "msg=stopped") || !strings.Contains(s, "building bin/hookledger") {
		t.Fatalf("make run output:\n%s", s)
	}
}

// SIGINT sent to make run's whole process group (as kill -INT -PGID does)
// stops the server cleanly and leaves no make error line. make itself,
// interrupted too, dies of the signal as it always does.
func TestMakeRunInterruptedGroup(t *testing.T) {
	root := needMake(t)
	out := &lockedBuffer{}
	cmd := makeCommand("--no-print-directory", "-C", root, "run", "CONFIG="+makeRunConfig(t))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntilOrExit(t, out, "hookledger serving", cmd)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	// GNU make interrupted together with its child sometimes loses the
	// race to reap it: the child is already reaped when make's own wait
	// runs, and make reports "wait: No child processes" and exits 2. That
	// line is about make alone; what this test checks is that the server
	// stopped cleanly, which its own log line says.
	s, reapRace := withoutReapRace(out.String())
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && (ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGINT || reapRace && ee.ExitCode() == 2)) {
		t.Fatalf("make run: %v\n%s", err, out)
	}
	if strings.Contains(s, "make: ***") || !strings.Contains(s, "msg=stopped") {
		t.Fatalf("make run output:\n%s", out)
	}
}

// withoutReapRace removes GNU make's report of the race above from out,
// and says whether it was there: the "wait: No child processes" line, at
// whatever level make ran (make[1] when a make started it), with the
// "Waiting for unfinished jobs" line make may print after it. Any other
// line of make's stays, and so does a jobs line without the race.
func withoutReapRace(out string) (string, bool) {
	if !makeReapWait.MatchString(out) {
		return out, false
	}
	return makeReapRace.ReplaceAllString(out, ""), true
}

var (
	makeReapWait = regexp.MustCompile(`(?m)^make(\[\d+\])?: \*\*\* wait: No child processes`)
	makeReapRace = regexp.MustCompile(`(?m)^make(\[\d+\])?: \*\*\* (wait: No child processes|Waiting for unfinished jobs).*$`)
)

// The reap race is recognised at any make level, with the jobs line that
// follows it, as make test's CI run printed it; make's other errors stay.
func TestWithoutReapRace(t *testing.T) {
	stopped := "time=2026-12-05T21:32:41.796Z level=INFO msg=stopped\n"
	for _, tc := range []struct {
		name, out, want string
		race            bool
	}{
		{"top level", stopped + "make: *** wait: No child processes.  Stop.\n", stopped + "\n", true},
		{"under make test", stopped + "make[1]: *** wait: No child processes.  Stop.\n" +
			"make[1]: *** Waiting for unfinished jobs....\n" + "make[1]: *** wait: No child processes.  Stop.\n",
			stopped + "\n\n\n", true},
		{"no race", stopped, stopped, false},
		{"another error", stopped + "make: *** [Makefile:26: run] Error 1\n", stopped + "make: *** [Makefile:26: run] Error 1\n", false},
		{"an error beside the race", "make: *** [Makefile:26: run] Error 1\nmake: *** wait: No child processes.  Stop.\n",
			"make: *** [Makefile:26: run] Error 1\n\n", true},
		{"jobs alone", "make: *** Waiting for unfinished jobs....\n", "make: *** Waiting for unfinished jobs....\n", false},
	} {
		got, race := withoutReapRace(tc.out)
		if got != tc.want || race != tc.race {
			t.Errorf("%s: withoutReapRace(%q) = %q, %v; want %q, %v", tc.name, tc.out, got, race, tc.want, tc.race)
		}
	}
}

func waitUntilOrExit(t *testing.T, out *lockedBuffer, want string, cmd *exec.Cmd) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute) // a cold build
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("no %q in time:\n%s", want, out)
		}
		if cmd.ProcessState != nil {
			t.Fatalf("make run ended early:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the build and start, not measuring time
	}
}

// make demo is pty-safe like make run: the script plays, and Ctrl-C on the
// terminal stops the demo cleanly with no make error line.
func TestMakeDemoCtrlCOnATerminal(t *testing.T) {
	root := needMake(t)
	master, tty := openPTY(t)
	defer master.Close()
	cmd := makeCommand("--no-print-directory", "-C", root, "demo",
		"DEMO_FLAGS=--listen 127.0.0.1:0 --speed 20 --no-open --dir "+filepath.Join(t.TempDir(), "demo"))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	out := &lockedBuffer{}
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(out, master); close(copied) }()
	waitUntilOrExit(t, out, "press Ctrl-C", cmd)
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	err := cmd.Wait()
	<-copied
	if err != nil {
		t.Fatalf("make demo after Ctrl-C: %v; want exit 0\n%s", err, out)
	}
	if s := out.String(); strings.Contains(s, "make: ***") || !strings.Contains(s, "stopped") || !strings.Contains(s, "Log in once: http://127.0.0.1:") {
		t.Fatalf("make demo output:\n%s", s)
	}
}
