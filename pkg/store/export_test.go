package store

import "context"

// RawResult reads the record id of push_results as stored.
func (s *Store) RawResult(ctx context.Context, id string, into any) error {
	return s.getByID(ctx, colResults, id, into)
}
