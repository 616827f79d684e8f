package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// Batch sizes of ImportBindings. New bindings go in with unordered InsertMany, the fastest write
// on both servers (the embedded FerretDB: 11,000 to 19,000 documents a second in batches of
// 2,000); changed ones with unordered bulk replaces by _id, which the embedded server does about
// a thousand a second, so they come in smaller batches for a steadier progress report.
const (
	ImportInsertBatch  = 2000
	ImportReplaceBatch = 500
)

// ImportResult counts what ImportBindings did with its rows.
type ImportResult struct {
	// Inserted: user numbers that had no binding.
	Inserted int `json:"inserted"`
	// Updated: user numbers bound to another openid before.
	Updated int `json:"updated"`
	// Unchanged: bindings already as given; nothing was written for them.
	Unchanged int `json:"unchanged"`
	// Conflicts are the rows left out because their openid is bound to another user number,
	// which the import leaves bound to it: a follower is bound to one user number.
	Conflicts []ImportConflict `json:"-"`
}

// ImportConflict is a row ImportBindings left out: rows[Row]'s openid is bound to UserID.
type ImportConflict struct {
	Row    int
	UserID string
}

// ImportProgress is how far ImportBindings is.
type ImportProgress struct {
	// Compared is how many stored bindings have been read to compare the rows with. They are
	// read first, and Done stays 0 until all are.
	Compared int
	// Done is how many rows are done: found unchanged, or written.
	Done int
}

// importProgressEvery is how many stored bindings are read between two progress reports.
const importProgressEvery = 10_000

// ImportBindings stores many bindings at once: each user number in rows is bound to its openid.
// The user numbers must be distinct, and so must the openids. A row whose openid another user
// number keeps is left out and named in the result's Conflicts. Each binding written is the
// follower's for the binding page too (its followers record names the user number, as Bind
// writes it). progress, when set, is told how far the import is after
// every step.
//
// Which rows change is decided by reading every stored binding once, in one pass: the only
// filter the embedded FerretDB answers from an index is an exact {_id}, so asking for the rows
// of a batch ($in) would read the whole table again for each batch, and a lookup per row costs
// a round trip each. Then only what differs is written: new bindings with unordered inserts,
// changed ones with replaces by _id. Importing the same rows again writes nothing.
func (s *Store) ImportBindings(ctx context.Context, rows []Binding, progress func(ImportProgress)) (ImportResult, error) {
	var res ImportResult
	var p ImportProgress
	report := func() {
		if progress != nil {
			progress(p)
		}
	}
	want := make(map[string]string, len(rows))
	wantOpenIDs := make(map[string]bool, len(rows))
	for _, b := range rows {
		if _, dup := want[b.UserID]; dup {
			return res, fmt.Errorf("import bindings: user number %q given twice", b.UserID)
		}
		if wantOpenIDs[b.OpenID] {
			return res, fmt.Errorf("import bindings: openid %q given twice", b.OpenID)
		}
		want[b.UserID], wantOpenIDs[b.OpenID] = b.OpenID, true
	}
	// stored holds the current binding of the rows' user numbers that have one, as read;
	// owners, the user numbers bound to the rows' openids now.
	stored := make(map[string]Binding)
	owners := make(map[string][]string)
	err := s.EachBinding(ctx, func(b Binding) error {
		if p.Compared++; p.Compared%importProgressEvery == 0 {
			report()
		}
		if wantOpenIDs[b.OpenID] {
			owners[b.OpenID] = append(owners[b.OpenID], b.UserID)
		}
		openID, ok := want[b.UserID]
		if !ok {
			return nil
		}
		stored[b.UserID] = b
		if openID == b.OpenID {
			res.Unchanged++
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("import bindings: %w", err)
	}
	p.Done = res.Unchanged
	report()
	now := s.now()
	var inserts []any
	var replaces []mongo.WriteModel
	var replaced []any         // the bindings of replaces
	wrote := map[string]bool{} // user number of a row written → whether it was inserted (else replaced)
	flushInserts := func() error {
		if len(inserts) == 0 {
			return nil
		}
		// The followers' records first: a record naming a user number that is not bound to it
		// counts for nothing (BindingOf), while a binding whose follower's record does not name
		// it could not be seen or undone on the binding page, and an import stopped in between
		// and run again would find the binding unchanged and leave it so.
		if err := s.ownFollowers(ctx, inserts, now); err != nil {
			return err
		}
		n, raced, err := s.insertBindings(ctx, inserts)
		if err != nil {
			return err
		}
		for _, x := range inserts {
			wrote[x.(Binding).UserID] = true
		}
		for _, b := range raced {
			delete(wrote, b.UserID) // replaced, below
		}
		res.Inserted += n
		p.Done += n
		report()
		// A user bound (on the bind page) between the read and this insert: the file wins, as
		// it would have a moment later.
		for _, b := range raced {
			replaces, replaced = append(replaces, replaceBinding(b)), append(replaced, b)
		}
		inserts = inserts[:0]
		return nil
	}
	// flushReplaces writes the replaces gathered, in batches, while at least least are waiting.
	flushReplaces := func(least int) error {
		for len(replaces) > 0 && len(replaces) >= least {
			n := min(len(replaces), ImportReplaceBatch)
			if err := s.ownFollowers(ctx, replaced[:n], now); err != nil {
				return err
			}
			if err := bulkWrite(ctx, s.bindings, replaces[:n], options.BulkWrite().SetOrdered(false)); err != nil {
				return fmt.Errorf("import bindings: %w", err)
			}
			for _, x := range replaced[:n] {
				wrote[x.(Binding).UserID] = false
			}
			res.Updated += n
			p.Done += n
			report()
			replaces, replaced = replaces[n:], replaced[n:]
		}
		return nil
	}
	keeper := importConflicts(rows, want, stored, owners)
	for i, b := range rows {
		old, ok := stored[b.UserID]
		if ok && old.OpenID == b.OpenID {
			continue
		}
		if other, ok := keeper[i]; ok {
			res.Conflicts = append(res.Conflicts, ImportConflict{Row: i, UserID: other})
			p.Done++
			continue
		}
		b.Updated, b.Following = now, false
		if !ok {
			inserts = append(inserts, b)
			if len(inserts) == ImportInsertBatch {
				if err := flushInserts(); err != nil {
					return res, err
				}
			}
			continue
		}
		replaces, replaced = append(replaces, replaceBinding(b)), append(replaced, b)
		if err := flushReplaces(ImportReplaceBatch); err != nil {
			return res, err
		}
	}
	if err := flushInserts(); err != nil {
		return res, err
	}
	if err := flushReplaces(1); err != nil {
		return res, err
	}
	return res, s.yieldToPageBinds(ctx, rows, now, wrote, stored, &res)
}

// yieldToPageBinds finds the followers a student bound on the binding page, to another user
// number, while the import ran (after its read, before its write of the row): the follower is
// then bound to two user numbers. The page wins, as it would have had the import read its
// binding: the row's binding is undone (the user number's binding before the import, prior,
// put back), and the row reported as a conflict. One more read of every binding; a page's bind
// after it sees the import's binding, and replaces it as usual.
func (s *Store) yieldToPageBinds(ctx context.Context, rows []Binding, written time.Time, wrote map[string]bool, prior map[string]Binding, res *ImportResult) error {
	rowOf := make(map[string]int, len(wrote)) // openid of a row written → its row
	for i, b := range rows {
		if _, ok := wrote[b.UserID]; ok {
			rowOf[b.OpenID] = i
		}
	}
	if len(rowOf) == 0 {
		return nil
	}
	others := map[string]Binding{} // openid of a row → the latest binding of another user number
	err := s.EachBinding(ctx, func(b Binding) error {
		i, ok := rowOf[b.OpenID]
		if !ok || rows[i].UserID == b.UserID {
			return nil
		}
		if o, seen := others[b.OpenID]; !seen || b.Updated.After(o.Updated) {
			others[b.OpenID] = b
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("import bindings: checking for binds made meanwhile: %w", err)
	}
	for openID, page := range others {
		i := rowOf[openID]
		row := Binding{UserID: rows[i].UserID, OpenID: openID, Updated: written}
		gone, err := s.removeBinding(ctx, row)
		if err != nil {
			return fmt.Errorf("import bindings: undoing %s's binding of %s: %w", row.UserID, openID, err)
		}
		if before, ok := prior[row.UserID]; ok && gone {
			// Its binding before the import, unless the user number was bound since; its
			// follower's record still names it (a replace leaves it).
			if _, err := s.bindings.InsertOne(ctx, before); err != nil && !mongo.IsDuplicateKeyError(err) {
				return fmt.Errorf("import bindings: putting back %s's binding of %s: %w", row.UserID, before.OpenID, err)
			}
		}
		if err := s.pointTo(ctx, page); err != nil {
			return fmt.Errorf("import bindings: keeping %s's bind of %s: %w", page.UserID, openID, err)
		}
		if wrote[row.UserID] {
			res.Inserted--
		} else {
			res.Updated--
		}
		res.Conflicts = append(res.Conflicts, ImportConflict{Row: i, UserID: page.UserID})
	}
	return nil
}

// pointTo makes the followers record of b.OpenID name b's user number, as Bind left it, if b is
// still that user number's binding as read: a later bind or unbind of the student's stands.
func (s *Store) pointTo(ctx context.Context, b Binding) error {
	defer s.followers.lock(b.OpenID)()
	cur, err := s.Binding(ctx, b.UserID)
	if errors.Is(err, ErrNotFound) || err == nil && (cur.OpenID != b.OpenID || !cur.Updated.Equal(b.Updated)) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = s.col(colFollowers).UpdateOne(ctx, bson.D{{Key: "_id", Value: b.OpenID}},
		bson.M{"$set": bson.M{"userid": b.UserID, "bound": b.Updated}})
	return err
}

// importConflicts returns the rows to leave out, each with the user number that keeps its
// openid: another user number bound to it now that the import does not move elsewhere, or whose
// own row is left out. A row left out keeps its user number where it is, which may leave out
// others in turn: the rows whose openid that user number holds are checked again, so each row
// is checked a bounded number of times and a chain of conflicts costs time linear in the rows.
func importConflicts(rows []Binding, want map[string]string, stored map[string]Binding, owners map[string][]string) map[int]string {
	row := make(map[string]int, len(rows)) // user number → its row
	for i, b := range rows {
		row[b.UserID] = i
	}
	dependents := map[string][]int{} // user number → the rows whose openid it holds now
	queue := make([]int, 0, len(rows))
	for i, b := range rows {
		for _, u := range owners[b.OpenID] {
			dependents[u] = append(dependents[u], i)
		}
		queue = append(queue, i)
	}
	out := map[int]string{}
	leaveOut := func(i int) bool {
		b := rows[i]
		if _, left := out[i]; left || stored[b.UserID].OpenID == b.OpenID {
			return false
		}
		for _, u := range owners[b.OpenID] {
			j, inFile := row[u]
			_, uLeft := out[j]
			if u != b.UserID && (!inFile || uLeft || want[u] == b.OpenID) {
				out[i] = u
				return true
			}
		}
		return false
	}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		if leaveOut(i) {
			queue = append(queue, dependents[rows[i].UserID]...)
		}
	}
	return out
}

// ownFollowers records, in the followers records the binding page reads, that each openid of
// bs (Binding values) is bound to its user number, as Bind does for one. Records are inserted
// unordered, the fast write; the openids that have one already (the platform's events made it)
// get an update by _id.
func (s *Store) ownFollowers(ctx context.Context, bs []any, now time.Time) error {
	docs := make([]any, 0, len(bs))
	for _, x := range bs {
		b := x.(Binding)
		docs = append(docs, bson.D{{Key: "_id", Value: b.OpenID}, {Key: "userid", Value: b.UserID}, {Key: "bound", Value: now},
			{Key: "following", Value: true}, {Key: "updated", Value: now}})
	}
	dups, err := insertNew(ctx, s.col(colFollowers), docs)
	if err != nil {
		return fmt.Errorf("import bindings: the followers' records: %w", err)
	}
	models := make([]mongo.WriteModel, 0, len(dups))
	for _, i := range dups {
		b := bs[i].(Binding)
		models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: b.OpenID}}).
			SetUpdate(bson.M{"$set": bson.M{"userid": b.UserID, "bound": now}}))
	}
	if err := bulkWrite(ctx, s.col(colFollowers), models, options.BulkWrite().SetOrdered(false)); err != nil {
		return fmt.Errorf("import bindings: the followers' records: %w", err)
	}
	return nil
}

func replaceBinding(b Binding) mongo.WriteModel {
	return mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: b.UserID}}).SetReplacement(b).SetUpsert(true)
}

// insertBindings inserts docs unordered and returns how many went in, and the bindings whose
// user number was bound meanwhile (a duplicate key).
func (s *Store) insertBindings(ctx context.Context, docs []any) (int, []Binding, error) {
	dups, err := insertNew(ctx, s.bindings, docs)
	if err != nil {
		return 0, nil, fmt.Errorf("import bindings: %w", err)
	}
	raced := make([]Binding, 0, len(dups))
	for _, i := range dups {
		raced = append(raced, docs[i].(Binding))
	}
	return len(docs) - len(raced), raced, nil
}

// insertNew inserts docs unordered into c and returns the indexes of those whose _id was
// there already; any other failure is an error.
func insertNew(ctx context.Context, c *mongo.Collection, docs []any) ([]int, error) {
	_, err := c.InsertMany(ctx, docs, unordered)
	if err == nil {
		return nil, nil
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
		return nil, err
	}
	dups := make([]int, 0, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		if we.Code != 11000 {
			return nil, err
		}
		dups = append(dups, we.Index)
	}
	return dups, nil
}

// EachBinding calls fn with every stored binding (its Following not set), in the store's
// order, until fn returns an error.
func (s *Store) EachBinding(ctx context.Context, fn func(Binding) error) error {
	cur, err := s.bindings.Find(ctx, bson.D{}, options.Find().SetBatchSize(5000))
	if err != nil {
		return fmt.Errorf("read bindings: %w", err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		var b Binding
		if err := cur.Decode(&b); err != nil {
			return fmt.Errorf("read bindings: %w", err)
		}
		if err := fn(b); err != nil {
			return err
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("read bindings: %w", err)
	}
	return nil
}

// DeleteBinding removes the binding of a campus user number, or returns ErrNotFound.
func (s *Store) DeleteBinding(ctx context.Context, userID string) error {
	r, err := s.bindings.DeleteOne(ctx, bson.D{{Key: "_id", Value: userID}})
	if err != nil {
		return fmt.Errorf("delete binding: %w", err)
	}
	if r.DeletedCount == 0 {
		return ErrNotFound
	}
	return nil
}
