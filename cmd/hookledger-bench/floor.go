package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"syscall"
)

// floorRing is the cheapest durable acknowledgement we know how to build:
// every request body is framed and written into a preallocated file used as
// a ring, and the answer waits for a shared fdatasync (group commit, one
// writer, whatever queued during the previous sync joins the next). The
// blocks already exist, so fdatasync flushes data without touching file
// metadata; nothing parses, verifies, indexes or keeps the data past the
// ring. No receiver that must not acknowledge before its data is durable
// can beat it on the same disk and processors, which makes it the floor
// that the receive benchmark shows beside the no-op server: the gap between
// noop and floor is the price of durability on this machine, the gap
// between floor and hookledger is hookledger's own.
type floorRing struct {
	f    *os.File
	size int64
	off  int64
	q    chan *floorReq
	pool sync.Pool
}

type floorReq struct {
	buf  []byte
	done chan error
}

// floorRingSize is the ring's length: written once with zeros at start-up
// so that later writes overwrite allocated blocks.
const floorRingSize = 256 << 20

func newFloorRing(path string) (*floorRing, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("floor ring: %w", err)
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < floorRingSize; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			f.Close()
			return nil, fmt.Errorf("floor ring: preallocate: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("floor ring: preallocate: %w", err)
	}
	r := &floorRing{f: f, size: floorRingSize, q: make(chan *floorReq, 4096)}
	r.pool.New = func() any { return &floorReq{done: make(chan error, 1)} }
	go r.flushLoop()
	return r, nil
}

// append frames body (length, then bytes) and waits until it is durable.
func (r *floorRing) append(body []byte) error {
	req := r.pool.Get().(*floorReq)
	req.buf = binary.AppendUvarint(req.buf[:0], uint64(len(body)))
	req.buf = append(req.buf, body...)
	r.q <- req
	err := <-req.done
	r.pool.Put(req)
	return err
}

func (r *floorRing) flushLoop() {
	var out []byte
	batch := make([]*floorReq, 0, 256)
	for first := range r.q {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < cap(batch) {
			select {
			case req := <-r.q:
				batch = append(batch, req)
			default:
				break drain
			}
		}
		out = out[:0]
		for _, req := range batch {
			out = append(out, req.buf...)
		}
		if r.off+int64(len(out)) > r.size {
			r.off = 0
		}
		_, err := r.f.WriteAt(out, r.off)
		r.off += int64(len(out))
		if err == nil {
			err = syscall.Fdatasync(int(r.f.Fd()))
		}
		for _, req := range batch {
			req.done <- err
		}
	}
}

func (r *floorRing) close() error {
	close(r.q)
	return r.f.Close()
}

// floorHandler answers like the no-op handler, after the body is durable.
func floorHandler(ring *floorRing) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		if err == nil {
			err = ring.append(body)
		}
		if err != nil {
			http.Error(w, "not stored", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"status":"stored","events":1}`+"\n")
	})
}

// serveFloor is serveNoop with the durable ring in front of the answer.
func serveFloor(ctx context.Context, stderr io.Writer, listen, path string) error {
	ring, err := newFloorRing(path)
	if err != nil {
		return err
	}
	defer ring.close()
	return serveHandler(ctx, stderr, listen, floorHandler(ring))
}
