package main

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"
)

// walWindow answers whose pages a SQLite server writes: while a read
// transaction is held on the database the WAL cannot start over, so every
// frame committed meanwhile stays in the file, and each frame's header
// names its page. SQLite's dbstat table then names the table or index
// each page belongs to. Holding the snapshot stops checkpoints from
// finishing, so the WAL grows (about 80 KB per event) and the server runs
// slower than it would: a run measured this way is for the breakdown, not
// for its latency.
type walWindow struct {
	path    string
	db      *sql.DB
	snap    *sql.Tx
	salt    [8]byte
	frames0 int   // valid frames in the WAL when the window opened
	pk0     int64 // the newest event then
}

// countWALFrames counts res's WAL frames for window from start on.
func countWALFrames(ctx context.Context, res *e2eResult, start time.Time, window time.Duration) error {
	select {
	case <-time.After(time.Until(start)):
	case <-ctx.Done():
		return ctx.Err()
	}
	w, err := openWALWindow(ctx, res.walPath)
	if err != nil {
		return err
	}
	select {
	case <-time.After(window):
	case <-ctx.Done():
		w.close()
		return ctx.Err()
	}
	res.wal, err = w.stop(ctx)
	return err
}

// walFrames is what a window counted.
type walFrames struct {
	events, frames, commits int
	byBtree                 map[string]int
}

// openWALWindow opens the window on the database file at path.
func openWALWindow(ctx context.Context, path string) (*walWindow, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return nil, fmt.Errorf("wal frames: open %s: %w", path, err)
	}
	w := &walWindow{path: path, db: db}
	if w.snap, err = db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}); err != nil {
		db.Close()
		return nil, fmt.Errorf("wal frames: begin: %w", err)
	}
	// The first read takes the snapshot; from then on the WAL keeps its
	// salt and every frame written after it.
	if err := w.snap.QueryRowContext(ctx, `SELECT coalesce(max(pk), 0) FROM events`).Scan(&w.pk0); err != nil {
		w.close()
		return nil, fmt.Errorf("wal frames: read events: %w", err)
	}
	f, err := os.Open(path + "-wal")
	if err != nil {
		w.close()
		return nil, fmt.Errorf("wal frames: %w", err)
	}
	defer f.Close()
	var hdr walHeader
	if hdr, err = readWALHeader(f); err == nil {
		w.salt = hdr.salt
		w.frames0, _, err = scanWALFrames(f, hdr, 0, nil)
	}
	if err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

func (w *walWindow) close() {
	if w.snap != nil {
		_ = w.snap.Rollback()
	}
	w.db.Close()
}

// stop closes the window and counts the frames written in it, by btree.
func (w *walWindow) stop(ctx context.Context) (*walFrames, error) {
	defer w.close()
	f, err := os.Open(w.path + "-wal")
	if err != nil {
		return nil, fmt.Errorf("wal frames: %w", err)
	}
	defer f.Close()
	hdr, err := readWALHeader(f)
	if err != nil {
		return nil, err
	}
	from := w.frames0
	if hdr.salt != w.salt {
		// The WAL started over before the snapshot held it: every frame
		// in it is the window's.
		from = 0
	}
	pages := map[uint32]int{}
	frames, commits, err := scanWALFrames(f, hdr, from, pages)
	if err != nil {
		return nil, err
	}
	// The snapshot ends here, so the newest pages are named too.
	_ = w.snap.Rollback()
	w.snap = nil
	out := &walFrames{frames: frames, commits: commits, byBtree: map[string]int{}}
	var pk1 int64
	if err := w.db.QueryRowContext(ctx, `SELECT coalesce(max(pk), 0) FROM events`).Scan(&pk1); err != nil {
		return nil, fmt.Errorf("wal frames: read events: %w", err)
	}
	out.events = int(pk1 - w.pk0)
	names, err := btreeOfPages(ctx, w.db)
	if err != nil {
		return nil, err
	}
	for pg, n := range pages {
		name, ok := names[pg]
		if !ok {
			name = "(freed or new page)"
		}
		out.byBtree[name] += n
	}
	return out, nil
}

// btreeOfPages names the table or index of every page of the database.
func btreeOfPages(ctx context.Context, db *sql.DB) (map[uint32]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name, pageno FROM dbstat`)
	if err != nil {
		return nil, fmt.Errorf("wal frames: dbstat: %w", err)
	}
	defer rows.Close()
	out := map[uint32]string{}
	for rows.Next() {
		var name string
		var pg uint32
		if err := rows.Scan(&name, &pg); err != nil {
			return nil, fmt.Errorf("wal frames: dbstat: %w", err)
		}
		out[pg] = name
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("wal frames: dbstat: %w", err)
	}
	return out, nil
}

// walHeader is what the frames are checked against: the page size and
// the salt every frame of the WAL's current generation carries.
type walHeader struct {
	pageSize int64
	salt     [8]byte
}

// The WAL format (sqlite.org/fileformat2.html, "WAL File Format"): a
// 32-byte header, then frames of a 24-byte header and a page each.
const (
	walHeaderSize      = 32
	walFrameHeaderSize = 24
)

func readWALHeader(r io.ReaderAt) (walHeader, error) {
	var b [walHeaderSize]byte
	if _, err := r.ReadAt(b[:], 0); err != nil {
		return walHeader{}, fmt.Errorf("wal frames: read the WAL header: %w", err)
	}
	if m := binary.BigEndian.Uint32(b[0:4]); m&^1 != 0x377f0682 {
		return walHeader{}, fmt.Errorf("wal frames: not a WAL file (magic %#x)", m)
	}
	h := walHeader{pageSize: int64(binary.BigEndian.Uint32(b[8:12]))}
	if h.pageSize == 1 {
		h.pageSize = 65536
	}
	copy(h.salt[:], b[16:24])
	return h, nil
}

// scanWALFrames reads the frame headers of the WAL's current generation
// (a frame of an earlier one, left past the end, carries another salt)
// from frame `from` on (0 the first), and returns how many there are and
// how many of them end a commit; pages, when not nil, counts them by page
// number.
func scanWALFrames(r io.ReaderAt, h walHeader, from int, pages map[uint32]int) (frames, commits int, err error) {
	var b [walFrameHeaderSize]byte
	for i := from; ; i++ {
		off := walHeaderSize + int64(i)*(walFrameHeaderSize+h.pageSize)
		if _, err := r.ReadAt(b[:], off); err != nil {
			if errors.Is(err, io.EOF) {
				return frames, commits, nil
			}
			return 0, 0, fmt.Errorf("wal frames: read frame %d: %w", i, err)
		}
		if [8]byte(b[8:16]) != h.salt {
			return frames, commits, nil
		}
		frames++
		if binary.BigEndian.Uint32(b[4:8]) != 0 {
			commits++
		}
		if pages != nil {
			pages[binary.BigEndian.Uint32(b[0:4])]++
		}
	}
}

// print writes the breakdown: frames per event, and the btrees that
// wrote the most.
func (w *walFrames) print(out io.Writer, target string, window time.Duration, top int) {
	if w.events <= 0 || w.commits == 0 {
		fmt.Fprintf(out, "%s: WAL frames: no event or commit in the %s window\n", target, window)
		return
	}
	ev := float64(w.events)
	fmt.Fprintf(out, "\nWhose pages the writer wrote (%s, a %s window while sending, a read snapshot held so the WAL kept\n"+
		"every frame: this run's latency is not comparable): %d events, %d frames in %d commits, %.1f frames per event,\n"+
		"%.2f events and %.0f frames per commit\n",
		target, window, w.events, w.frames, w.commits, float64(w.frames)/ev, ev/float64(w.commits), float64(w.frames)/float64(w.commits))
	names := make([]string, 0, len(w.byBtree))
	for n := range w.byBtree {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if w.byBtree[names[i]] != w.byBtree[names[j]] {
			return w.byBtree[names[i]] > w.byBtree[names[j]]
		}
		return names[i] < names[j]
	})
	if len(names) > top {
		names = names[:top]
	}
	fmt.Fprintf(out, "  %-32s %8s %10s %11s\n", "table or index", "frames", "per event", "per commit")
	for _, n := range names {
		c := w.byBtree[n]
		fmt.Fprintf(out, "  %-32s %8d %10.2f %11.2f\n", n, c, float64(c)/ev, float64(c)/float64(w.commits))
	}
}
