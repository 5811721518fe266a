package powerloss

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
)

// pageSize is the unit in which unsynced data is kept: a 4 KiB page, the
// unit a kernel page cache keeps dirty data in.
const pageSize = 4096

// page is one page of a file as a reader sees it, with the span of it that
// was written since the file's last sync.
type page struct {
	data   [pageSize]byte
	lo, hi int // the unsynced bytes are data[lo:hi]
}

// overlay is the volatile state of one backing file: the pages written and
// not yet synced, and the file's size as a reader sees it. The backing file
// holds exactly what survives a crash.
//
// Invariant: the backing file is never longer than size, because data only
// reaches it through sync (which writes below size) and truncate (which sets
// both).
type overlay struct {
	name string // the path under the mount when first opened, for reports

	mu    sync.Mutex
	size  int64
	pages map[int64]*page
}

func newOverlay(name string, size int64) *overlay {
	return &overlay{name: name, size: size, pages: map[int64]*page{}}
}

// readBacking fills buf from the backing file at off; bytes past its end read
// as zeros, as they do in a file that was extended and not yet written.
func readBacking(backing *os.File, buf []byte, off int64) error {
	n, err := backing.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read backing %s: %w", backing.Name(), err)
	}
	clear(buf[n:])
	return nil
}

// readAt reads the file as a reader sees it: unsynced pages over the
// backing file. Callers hold o.mu.
func (o *overlay) readAt(backing *os.File, dest []byte, off int64) (int, error) {
	if off >= o.size {
		return 0, nil
	}
	n := int(min(int64(len(dest)), o.size-off))
	dest = dest[:n]
	// runStart is where the current run of pages that come from the backing
	// file begins, so that a run is one read instead of one per page.
	runStart := -1
	flush := func(end int) error {
		if runStart < 0 {
			return nil
		}
		err := readBacking(backing, dest[runStart:end], off+int64(runStart))
		runStart = -1
		return err
	}
	for done := 0; done < n; {
		pos := off + int64(done)
		idx, in := pos/pageSize, int(pos%pageSize)
		m := min(pageSize-in, n-done)
		if p, ok := o.pages[idx]; ok {
			if err := flush(done); err != nil {
				return 0, err
			}
			copy(dest[done:done+m], p.data[in:in+m])
		} else if runStart < 0 {
			runStart = done
		}
		done += m
	}
	if err := flush(n); err != nil {
		return 0, err
	}
	return n, nil
}

// writeAt keeps data in unsynced pages; nothing reaches the backing file.
// Callers hold o.mu.
func (o *overlay) writeAt(backing *os.File, data []byte, off int64) error {
	for done := 0; done < len(data); {
		pos := off + int64(done)
		idx, in := pos/pageSize, int(pos%pageSize)
		m := min(pageSize-in, len(data)-done)
		p, ok := o.pages[idx]
		if !ok {
			p = &page{lo: in, hi: in + m}
			// The rest of the page is what a reader saw before this write.
			if start := idx * pageSize; start < o.size {
				valid := int(min(pageSize, o.size-start))
				if err := readBacking(backing, p.data[:valid], start); err != nil {
					return err
				}
			}
			o.pages[idx] = p
		}
		copy(p.data[in:in+m], data[done:done+m])
		p.lo, p.hi = min(p.lo, in), max(p.hi, in+m)
		done += m
	}
	o.size = max(o.size, off+int64(len(data)))
	return nil
}

// truncate sets the size after the caller has truncated the backing file to
// the same size: pages past the end go, and the tail of the last page reads
// as zeros if the file grows again. Callers hold o.mu.
func (o *overlay) truncate(size int64) {
	for idx, p := range o.pages {
		start := idx * pageSize
		switch {
		case start >= size:
			delete(o.pages, idx)
		case start+pageSize > size:
			cut := int(size - start)
			clear(p.data[cut:])
			p.hi = min(p.hi, cut)
			if p.lo >= p.hi {
				// Nothing unsynced is left; the rest is in the backing file.
				delete(o.pages, idx)
			}
		}
	}
	o.size = size
}

// sync writes the unsynced bytes to the backing file and then fsyncs it
// (fdatasync when datasync is set). It returns how many bytes it wrote. The
// pages are forgotten only once the backing file's sync succeeded. Callers
// hold o.mu.
func (o *overlay) sync(backing *os.File, datasync bool, fsync func(fd int, datasync bool) error) (int64, error) {
	idxs := make([]int64, 0, len(o.pages))
	for idx := range o.pages {
		idxs = append(idxs, idx)
	}
	slices.Sort(idxs)
	var n int64
	for _, idx := range idxs {
		p := o.pages[idx]
		if _, err := backing.WriteAt(p.data[p.lo:p.hi], idx*pageSize+int64(p.lo)); err != nil {
			return n, fmt.Errorf("write backing %s: %w", backing.Name(), err)
		}
		n += int64(p.hi - p.lo)
	}
	if err := fsync(int(backing.Fd()), datasync); err != nil {
		return n, fmt.Errorf("sync backing %s: %w", backing.Name(), err)
	}
	clear(o.pages)
	return n, nil
}

// unsynced counts the bytes written since the last sync (per page, the span
// from the first to the last unsynced byte). Callers hold o.mu.
func (o *overlay) unsynced() int64 {
	var n int64
	for _, p := range o.pages {
		n += int64(p.hi - p.lo)
	}
	return n
}
