package store

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrClosed is returned by a Writer that has been closed.
var ErrClosed = errors.New("record writer closed")

// Writer batches records from many goroutines into few writes (group commit): while one batch
// is being written, the next collects. Under light load a batch is one record and waits for
// nothing; under heavy load batches grow to MaxBatch records. The records of one Write go in
// one batch, which writes push_msgids before push_results (Store.write).
type Writer struct {
	s        *Store
	ch       chan pendingWrite
	maxBatch int
	timeout  time.Duration
	stop     chan struct{}
	closed   chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
	// ctx ends the batch writes still under way once Close has waited closeFlushWait for them.
	ctx    context.Context
	cancel context.CancelFunc
}

// closeFlushWait is how long Close lets batch writes under way finish before it ends them:
// a program stopping while the store does not answer must not wait out every batch's Timeout.
const closeFlushWait = time.Second

type pendingWrite struct {
	ws   []Write
	done chan error
}

// WriterOptions tunes a Writer.
type WriterOptions struct {
	// MaxBatch is the most records a batch takes (the records of one Write are never split).
	// Default 500.
	MaxBatch int
	// Flushers is how many batches may be written at once. Default 2.
	Flushers int
	// Timeout bounds one batch write. Default 10s.
	Timeout time.Duration
}

// NewWriter starts a Writer; Close stops it.
func (s *Store) NewWriter(o WriterOptions) *Writer {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 500
	}
	if o.Flushers <= 0 {
		o.Flushers = 2
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	w := &Writer{
		s: s, ch: make(chan pendingWrite, o.MaxBatch*4), maxBatch: o.MaxBatch, timeout: o.Timeout,
		stop: make(chan struct{}), closed: make(chan struct{}),
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	for range o.Flushers {
		w.wg.Add(1)
		go w.flusher()
	}
	return w
}

// Write stores the records, in one batch, and returns once they are written (or failed). A
// record that was there before answers its exists error, if it has one (the first such, in
// the order given).
func (w *Writer) Write(ctx context.Context, ws ...Write) error {
	done := make(chan error, 1)
	select {
	case w.ch <- pendingWrite{ws: ws, done: done}:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.stop:
		return ErrClosed
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-w.closed:
		select {
		case err := <-done:
			return err
		default:
			return ErrClosed
		}
	}
}

// Close writes what is queued and stops the writer; batch writes still under way after
// closeFlushWait are ended, their writers answered with the error.
func (w *Writer) Close() {
	w.once.Do(func() {
		close(w.stop)
		end := time.AfterFunc(closeFlushWait, w.cancel)
		w.wg.Wait()
		end.Stop()
		w.cancel()
		// Whatever slipped in after the flushers' last look is failed, never left hanging.
		for {
			select {
			case p := <-w.ch:
				p.done <- ErrClosed
			default:
				close(w.closed)
				return
			}
		}
	})
}

func (w *Writer) flusher() {
	defer w.wg.Done()
	batch := make([]pendingWrite, 0, w.maxBatch)
	recs := make([]Write, 0, 2*w.maxBatch)
	for {
		batch = batch[:0]
		select {
		case p := <-w.ch:
			w.flush(w.fill(append(batch, p)), recs)
		case <-w.stop:
			// Drain what is queued before stopping.
			for {
				if batch = w.fill(batch[:0]); len(batch) == 0 {
					return
				}
				w.flush(batch, recs)
			}
		}
	}
}

// fill adds to batch the writes queued, until it holds MaxBatch records or none is queued.
func (w *Writer) fill(batch []pendingWrite) []pendingWrite {
	n := 0
	for _, p := range batch {
		n += len(p.ws)
	}
	for n < w.maxBatch {
		select {
		case p := <-w.ch:
			batch = append(batch, p)
			n += len(p.ws)
		default:
			return batch
		}
	}
	return batch
}

func (w *Writer) flush(batch []pendingWrite, recs []Write) {
	recs = recs[:0]
	for _, p := range batch {
		recs = append(recs, p.ws...)
	}
	ctx, cancel := context.WithTimeout(w.ctx, w.timeout)
	existed, err := w.s.write(ctx, recs)
	cancel()
	if err != nil {
		w.s.log.Error("writing delivery records failed", "records", len(recs), "err", err)
	}
	i := 0 // recs[i] is the first record of p
	for _, p := range batch {
		first := i
		i += len(p.ws)
		if err != nil {
			p.done <- err
			continue
		}
		var exists error
		for j, rec := range p.ws {
			if existed[first+j] && rec.exists != nil {
				exists = rec.exists
				break
			}
		}
		p.done <- exists
	}
}
