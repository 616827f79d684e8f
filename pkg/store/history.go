package store

import (
	"context"
	"errors"

	"github.com/campus-it/ucs/pkg/push"
)

// Record is one of the records the store keeps of a push, for a person to read.
type Record struct {
	// Kind is final, sent or progress (see the keys of push_results).
	Kind   string
	Result push.Result
}

// The kinds of Record.
const (
	RecordFinal    = "final"
	RecordSent     = "sent"
	RecordProgress = "progress"
)

// History returns every record the store holds of ucsID, the most advanced first: its final
// result, its sent result and the progress of its attempts, each if written. None is not an
// error: a push no worker has reached has no record. It costs a read by _id for each key of
// the push (the one query the embedded FerretDB answers from an index).
func (s *Store) History(ctx context.Context, ucsID string) ([]Record, error) {
	var out []Record
	for _, id := range []string{ucsID + suffixReceipt, ucsID, ucsID + suffixLegacySent, ucsID + suffixProgress} {
		read := s.getResult
		if id == ucsID+suffixProgress {
			read = func(ctx context.Context, _ string) (push.Result, error) { return s.InProgress(ctx, ucsID) }
		}
		r, err := read(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return nil, err
		case id == ucsID+suffixProgress:
			out = append(out, Record{Kind: RecordProgress, Result: r})
		case r.State == push.StateSent:
			out = append(out, Record{Kind: RecordSent, Result: r})
		case id == ucsID && len(out) > 0 && out[0].Kind == RecordFinal:
			// The copy at <ucsId> of a worker's failure kept at <ucsId>/f.
		default:
			out = append(out, Record{Kind: RecordFinal, Result: r})
		}
	}
	return out, nil
}
