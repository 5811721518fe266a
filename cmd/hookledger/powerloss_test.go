//go:build linux

package main

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/powerloss"
)

// Power loss, not only kill -9: the server runs on a file system that keeps
// every write in memory until its file is fsynced (internal/powerloss). The
// power is cut while a commit is in flight (its WAL frames written, its
// fsync held), the server is killed and every unsynced byte is thrown away.
// Every event that got a 200 must still be in the backing file, which must
// pass integrity_check. kill -9 alone cannot tell synchronous=FULL from OFF:
// the kernel keeps a killed process's writes. This test can.
func TestPowerLossKeepsEveryAcknowledgedEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level power-loss test skipped in -short mode")
	}
	lossy, backing, mnt := powerloss.MountTemp(t)
	bin := buildBinary(t)
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
store: sqlite:%s
sources:
  - name: stripe
    kind: stripe
    secrets: [%s]
`, filepath.Join(mnt, "hookledger.db"), crashSecret)), 0o600); err != nil {
		t.Fatal(err)
	}

	// The schema first, by the migrate verb, which closes the store cleanly
	// (a store that never syncs loses even this).
	if out, err := exec.Command(bin, "migrate", "--config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("hookledger migrate: %v\n%s", err, out)
	}
	p := startBinary(t, bin, cfg)
	l := &load{round: "pl"}
	stop := make(chan struct{})
	wg := l.drive(t, "http://"+p.addr, 8, stop)
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)
	waitAcked(t, l, 300, p)

	// Hold the WAL's next fsync: the commit in flight has written its
	// frames and waits for them to be durable. With synchronous=FULL no
	// event is acknowledged while it waits; a store that acknowledges
	// without syncing the WAL goes on acknowledging.
	held := lossy.HoldNextSync("hookledger.db-wal")
	armedAt := l.nAcked.Load()
	const ackedWithoutSync = 200
	heldSync := false
	deadline := time.Now().Add(60 * time.Second)
	for !heldSync && l.nAcked.Load() < armedAt+ackedWithoutSync {
		if time.Now().After(deadline) {
			t.Fatalf("within 60 s neither a WAL sync came nor %d more events were acknowledged (%d so far)\n%s", ackedWithoutSync, l.nAcked.Load()-armedAt, p.logText())
		}
		select {
		case <-held:
			heldSync = true
		case <-time.After(5 * time.Millisecond): // polling progress, not measuring time
		}
	}

	// The power goes: the process dies with its commit unsynced, and so
	// does every byte the disk was not made to keep.
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("hookledger did not exit within 30 s of SIGKILL")
	}
	stopLoad()
	stats := lossy.Stats()
	rep, err := lossy.Crash()
	if err != nil {
		t.Fatal(err)
	}

	db := filepath.Join(backing, "hookledger.db")
	checkIntegrity(t, db)
	stored := map[string]bool{}
	if hasTable(t, db, "events") {
		stored = storedIDs(t, db)
	} else {
		t.Errorf("the power loss took the schema itself: no events table in %s", db)
	}
	var lost []string
	l.acked.Range(func(k, _ any) bool {
		if !stored[k.(string)] {
			lost = append(lost, k.(string))
		}
		return true
	})
	for id := range stored {
		if strings.HasPrefix(id, "evt_bad_") {
			t.Errorf("event %s with a bad signature was stored", id)
		}
	}
	t.Logf("acknowledged %d, stored %d, lost %d; WAL sync held: %v; through the mount: %d writes (%d bytes), %d syncs (%d bytes); the power cut discarded %s",
		l.nAcked.Load(), len(stored), len(lost), heldSync, stats.Writes, stats.WrittenBytes, stats.Syncs, stats.SyncedBytes, rep)

	if len(lost) > 0 {
		t.Errorf("%d of %d acknowledged events are not in the store after the power loss (e.g. %s): a 200 went out before its commit was durable",
			len(lost), l.nAcked.Load(), strings.Join(lost[:min(len(lost), 5)], ", "))
	}
	if !heldSync {
		t.Errorf("%d events were acknowledged after the WAL's next fsync was held, and that fsync never came: commits are acknowledged without being synced", ackedWithoutSync)
	}
	// The model must have had something to lose, or passing proves nothing.
	if rep.Lost["hookledger.db-wal"] == 0 {
		t.Errorf("the power cut discarded no unsynced WAL bytes (%s): the crash did not hit a commit in flight", rep)
	}
}

// hasTable reports whether the database file at path has the table.
func hasTable(t *testing.T, path, table string) bool {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// checkIntegrity opens the database file directly and runs SQLite's
// integrity_check on it.
func checkIntegrity(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`PRAGMA integrity_check`)
	if err != nil {
		t.Fatalf("integrity_check: %v", err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		problems = append(problems, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0] != "ok" {
		t.Fatalf("integrity_check after the power loss: %s", strings.Join(problems, "; "))
	}
}
