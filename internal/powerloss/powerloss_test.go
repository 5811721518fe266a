//go:build linux

package powerloss

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite"
)

// Work that touches a mapping of a file on the mount runs in a child process
// (this test binary run again): a page fault served by this very process
// would stop its goroutine without releasing its P, and a garbage collection
// waiting for that goroutine would wait forever for the FUSE server it
// stopped. System calls do not have that problem, so the rest runs here.
const childEnv = "POWERLOSS_TEST_CHILD"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		if err := runChild(strings.Split(args, "\n")); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild(args []string) error {
	switch args[0] {
	case "mmap": // mmap FILE: write two pages through a shared mapping
		f, err := os.OpenFile(args[1], os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if err := f.Truncate(2 * pageSize); err != nil {
			return err
		}
		mem, err := unix.Mmap(int(f.Fd()), 0, 2*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		copy(mem[100:], "first page")
		copy(mem[pageSize+5:], "second page")
		if err := unix.Munmap(mem); err != nil {
			return err
		}
		// close(2) makes the kernel write the dirty pages back (no sync).
		return f.Close()
	case "hold": // hold FILE: write, then fsync (the parent holds and kills it)
		f, err := os.OpenFile(args[1], os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.WriteString("never synced"); err != nil {
			return err
		}
		return f.Sync()
	case "sqlite": // sqlite DB SYNCHRONOUS ROWS: commit ROWS rows, then exit without closing
		n, err := strconv.Atoi(args[3])
		if err != nil {
			return err
		}
		db, err := sql.Open("sqlite", "file:"+args[1]+"?_pragma=journal_mode(WAL)&_pragma=synchronous("+args[2]+")")
		if err != nil {
			return err
		}
		db.SetMaxOpenConns(1)
		if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
			return err
		}
		for i := range n {
			if _, err := db.Exec(`INSERT INTO t (v) VALUES (?)`, strings.Repeat("v", 100+i)); err != nil {
				return err
			}
		}
		// Every commit returned: exit as a kill -9 would, no close, no
		// checkpoint.
		return nil
	}
	return fmt.Errorf("unknown child %q", args[0])
}

func child(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(args, "\n"))
	return cmd
}

func crash(t *testing.T, fsys *FS) Report {
	t.Helper()
	rep, err := fsys.Crash()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lost at the crash: %s", rep)
	return rep
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A write is visible through the mount at once and survives a crash only
// if its file was synced; a crash loses the rest, counted in the report.
func TestOnlySyncedWritesSurviveACrash(t *testing.T) {
	fsys, backing, mnt := MountTemp(t)
	synced, err := os.Create(filepath.Join(mnt, "synced"))
	if err != nil {
		t.Fatal(err)
	}
	defer synced.Close()
	if _, err := synced.WriteString("kept"); err != nil {
		t.Fatal(err)
	}
	if err := synced.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := synced.WriteString(", fdatasynced"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "unsynced"), []byte("all lost"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(int(synced.Fd())); err != nil {
		t.Fatal(err)
	}
	if _, err := synced.WriteString(", lost"); err != nil {
		t.Fatal(err)
	}
	synced.Close()

	if got := readFile(t, filepath.Join(mnt, "synced")); got != "kept, fdatasynced, lost" {
		t.Fatalf("read through the mount %q, want every write", got)
	}
	if st, err := os.Stat(filepath.Join(mnt, "unsynced")); err != nil || st.Size() != 8 {
		t.Fatalf("stat through the mount: %v, %v; want the unsynced size 8", st, err)
	}
	if got := readFile(t, filepath.Join(backing, "synced")); got != "kept, fdatasynced" {
		t.Fatalf("backing file before the crash %q, want what the syncs wrote", got)
	}
	if s := fsys.Stats(); s.Syncs != 2 || s.SyncedBytes != int64(len("kept, fdatasynced")) {
		t.Fatalf("stats %+v, want 2 syncs of %d bytes", s, len("kept, fdatasynced"))
	}

	rep := crash(t, fsys)
	if got := readFile(t, filepath.Join(backing, "synced")); got != "kept, fdatasynced" {
		t.Fatalf("after the crash %q, want only what was synced", got)
	}
	// The file's name is there (directory operations apply at once), its
	// data is not.
	if got := readFile(t, filepath.Join(backing, "unsynced")); got != "" {
		t.Fatalf("an unsynced file holds %q after the crash", got)
	}
	if rep.Lost["synced"] != int64(len(", lost")) || rep.Lost["unsynced"] != 8 || rep.Bytes != 14 {
		t.Fatalf("report %v, want 6 bytes of synced and 8 of unsynced", rep)
	}
	if entries, _ := os.ReadDir(mnt); len(entries) != 0 {
		t.Fatalf("the mount point still shows %d entries after the crash: not unmounted", len(entries))
	}
}

// Renames, unlinks and truncations reach the backing directory at once; a
// file's unsynced data follows it through a rename.
func TestDirectoryOperationsApplyAtOnce(t *testing.T) {
	fsys, backing, mnt := MountTemp(t)
	f, err := os.Create(filepath.Join(mnt, "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("data"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(mnt, "x"), filepath.Join(mnt, "y")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(backing, "y")); err != nil {
		t.Fatalf("rename not applied to the backing directory: %v", err)
	}
	if got := readFile(t, filepath.Join(mnt, "y")); got != "data" {
		t.Fatalf("after rename %q, want the unsynced data", got)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(backing, "y")); got != "data" {
		t.Fatalf("sync after a rename wrote %q to the new name", got)
	}
	if err := os.Truncate(filepath.Join(mnt, "y"), 2); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(backing, "y")); got != "da" {
		t.Fatalf("truncate not applied to the backing file at once: %q", got)
	}
	f.Close()
	if err := os.Remove(filepath.Join(mnt, "y")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(backing, "y")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unlink not applied to the backing directory: %v", err)
	}
	// A new file may reuse the inode number; it starts empty.
	if err := os.WriteFile(filepath.Join(mnt, "z"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(mnt, "z")); got != "" {
		t.Fatalf("a new file reads %q", got)
	}
	crash(t, fsys)
}

// Writes through a shared mapping reach the model as writes when the kernel
// writes the pages back, and are lost unless synced like any other.
func TestSharedMappingWrites(t *testing.T) {
	fsys, backing, mnt := MountTemp(t)
	for _, name := range []string{"kept", "lost"} {
		if out, err := child("mmap", filepath.Join(mnt, name)).CombinedOutput(); err != nil {
			t.Fatalf("mmap child: %v\n%s", err, out)
		}
	}
	want := make([]byte, 2*pageSize)
	copy(want[100:], "first page")
	copy(want[pageSize+5:], "second page")
	for _, name := range []string{"kept", "lost"} {
		if got := readFile(t, filepath.Join(mnt, name)); got != string(want) {
			t.Fatalf("%s through the mount does not show the mapped writes", name)
		}
	}
	if rep := fsys.Unsynced(); rep.Lost["kept"] == 0 || rep.Lost["lost"] == 0 {
		t.Fatalf("mapped writes did not arrive as unsynced writes: %v", rep)
	}
	f, err := os.OpenFile(filepath.Join(mnt, "kept"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	rep := crash(t, fsys)
	if got := readFile(t, filepath.Join(backing, "kept")); got != string(want) {
		t.Fatal("the synced mapped file lost data")
	}
	// The size was set by ftruncate, which applies at once; the data was
	// not synced.
	if got := readFile(t, filepath.Join(backing, "lost")); got != string(make([]byte, 2*pageSize)) {
		t.Fatal("the unsynced mapped file kept data through the crash")
	}
	// The kernel writes a mapping back a whole page at a time.
	if rep.Lost["lost"] != 2*pageSize {
		t.Fatalf("report %v, want the two written-back pages of lost", rep)
	}
}

// A held sync waits, having written nothing, until its caller is killed;
// the crash then loses what it would have synced. Only a sync with something
// to write is held.
func TestHeldSyncLosesItsData(t *testing.T) {
	fsys, backing, mnt := MountTemp(t)
	held := fsys.HoldNextSync("held")
	// A sync with nothing to write is not the one held.
	clean, err := os.Create(filepath.Join(mnt, "clean-held"))
	if err != nil {
		t.Fatal(err)
	}
	if err := clean.Sync(); err != nil {
		t.Fatal(err)
	}
	clean.Close()
	select {
	case <-held:
		t.Fatal("a sync with nothing unsynced was held")
	default:
	}
	cmd := child("hold", filepath.Join(mnt, "held"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("child exited before its sync was held: %v\n%s", err, out.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the child's sync was not held within 30 s")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a process killed in a held sync did not exit within 30 s")
	}
	rep := crash(t, fsys)
	if rep.Lost["held"] != int64(len("never synced")) {
		t.Fatalf("report %v, want the held file's write", rep)
	}
	if got := readFile(t, filepath.Join(backing, "held")); got != "" {
		t.Fatalf("a held sync wrote %q", got)
	}
}

// SQLite in WAL mode over the mount: with synchronous=FULL every commit that
// returned survives the crash; NORMAL and OFF, which skip the fsync at
// commit, lose committed rows. The database passes integrity_check either way.
func TestSQLiteCommitsSurviveOnlyWithFullSync(t *testing.T) {
	const rows = 40
	for _, mode := range []string{"FULL", "NORMAL", "OFF"} {
		t.Run(mode, func(t *testing.T) {
			fsys, backing, mnt := MountTemp(t)
			if out, err := child("sqlite", filepath.Join(mnt, "t.db"), mode, strconv.Itoa(rows)).CombinedOutput(); err != nil {
				t.Fatalf("sqlite child: %v\n%s", err, out)
			}
			rep := crash(t, fsys)
			db, err := sql.Open("sqlite", filepath.Join(backing, "t.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var check string
			if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
				t.Fatalf("integrity_check: %q, %v", check, err)
			}
			// NORMAL and OFF may lose the table itself.
			tables, n := 0, 0
			if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 't'`).Scan(&tables); err != nil {
				t.Fatal(err)
			}
			if tables == 1 {
				if err := db.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("synchronous=%s: %d of %d committed rows survived", mode, n, rows)
			if mode == "FULL" {
				if n != rows {
					t.Fatalf("synchronous=FULL kept %d of %d committed rows", n, rows)
				}
				return
			}
			if n == rows {
				t.Fatalf("synchronous=%s kept every committed row: the model lost nothing", mode)
			}
			if rep.Lost["t.db-wal"] == 0 {
				t.Fatalf("synchronous=%s: no unsynced WAL bytes were lost: %v", mode, rep)
			}
		})
	}
}
