package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/event"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
	"go.mongodb.org/mongo-driver/mongo/writeconcern"
)

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("not found")

// Collection names.
const (
	colResults   = "push_results"
	colMsgIDs    = "push_msgids"
	colBindings  = "bindings"
	colFollowers = "followers"
	colKeys      = "signing_keys"
	// colClients holds the registered clients, keyed by client_id.
	colClients = "clients"
)

var (
	unordered = options.InsertMany().SetOrdered(false)
	ordered   = options.BulkWrite().SetOrdered(true)
)

// Options configures Open.
type Options struct {
	// URI of the MongoDB deployment.
	URI string
	// Database name.
	Database string
	// Retention is how long delivery records are kept.
	Retention time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger; nil discards.
	Logger *slog.Logger
	// ConnectTimeout bounds the wait for a server, at Open and at each operation, unless the
	// URI names one (serverSelectionTimeoutMS). Default 30s.
	ConnectTimeout time.Duration
	// Monitor, when set, sees every command the driver sends (tests use it to prove which
	// queries the hot paths make).
	Monitor *event.CommandMonitor
	// Tool is set by a program that writes no push results (api admin): its start does not
	// count as the upgrade to the present layout of push_results (see readLayout), so that an
	// operator's command run before the upgrade does not start its window early, and it sets
	// no retention on the indexes (Retention is not used).
	Tool bool
}

// Store is the MongoDB store.
type Store struct {
	client   *mongo.Client
	db       *mongo.Database
	results  *mongo.Collection
	msgIDs   *mongo.Collection
	bindings *mongo.Collection
	keys     *mongo.Collection
	now      func() time.Time
	log      *slog.Logger
	// ttl is true when the server expires records itself (a TTL index); otherwise Sweep must run.
	ttl       bool
	retention time.Duration
	// legacyBefore: pushes accepted before it may have records in an earlier layout (legacy).
	legacyBefore time.Time
	users        userLocks
	followers    userLocks
	// sessions orders a renewal and an end of one sign-in session: on a server that applies
	// an update as read, change and write back (the embedded FerretDB), a renewal could
	// otherwise write back a session ended a moment before.
	sessions userLocks
	// consents orders the writes of one grant's record (consent, use, latest code, revocation),
	// for the same reason.
	consents userLocks
}

// clientOptions are the driver's options for o: majority writes unless the URI names a write
// concern (w=…), so that a result the service has reported survives the loss of a replica, and
// the wait for a server o.ConnectTimeout unless the URI names one (serverSelectionTimeoutMS).
func clientOptions(o Options) *options.ClientOptions {
	opts := options.Client().ApplyURI(o.URI).
		SetMaxPoolSize(256).
		SetMonitor(o.Monitor)
	if opts.WriteConcern == nil {
		opts.SetWriteConcern(writeconcern.Majority())
	}
	if opts.ServerSelectionTimeout == nil {
		opts.SetServerSelectionTimeout(o.ConnectTimeout)
	}
	return opts
}

// Open connects, waits until the server answers and makes sure the indexes exist.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 30 * time.Second
	}
	if o.Retention == 0 {
		o.Retention = 30 * 24 * time.Hour
	}
	opts := clientOptions(o)
	if opts.Validate() != nil {
		// Not the driver's text: it quotes the value it could not read, a password among them.
		return nil, errors.New("connect to mongodb: mongodb.uri does not parse, or holds an option the driver refuses (percent-encode '%', ':', '/', '@' in the user, the password and option values)")
	}
	client, err := mongo.Connect(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to mongodb: %w", err)
	}
	// The first answer is awaited as long as any later one: the URI's serverSelectionTimeoutMS,
	// else ConnectTimeout (also when the URI says 0, the driver's "no limit").
	wait := o.ConnectTimeout
	if t := *opts.ServerSelectionTimeout; t > 0 {
		wait = t
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := client.Ping(pctx, nil); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, fmt.Errorf("ping mongodb: %w", err)
	}
	db := client.Database(o.Database)
	s := &Store{
		client: client, db: db,
		results:   db.Collection(colResults),
		msgIDs:    db.Collection(colMsgIDs),
		bindings:  db.Collection(colBindings),
		keys:      db.Collection(colKeys),
		now:       o.Now,
		log:       o.Logger,
		retention: o.Retention,
	}
	if err := s.ensureIndexes(ctx, o.Tool); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, err
	}
	if s.legacyBefore, err = s.readLayout(ctx, o.Tool); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, err
	}
	return s, nil
}

// Close disconnects.
func (s *Store) Close(ctx context.Context) error { return s.client.Disconnect(ctx) }

// Ping checks that the server answers, for readiness probes.
func (s *Store) Ping(ctx context.Context) error { return s.client.Ping(ctx, nil) }

// ExpiresItself reports whether the server enforces retention with a TTL index; when it does
// not (FerretDB), Sweep must be called periodically.
func (s *Store) ExpiresItself() bool { return s.ttl }

// ensureIndexes makes the collections and their indexes. A tool (api admin) leaves the indexes
// alone: its configuration may be a file with the store's address alone, and the retention it
// would set on the TTL indexes (MongoDB rewrites them to match) would delete the records older
// than it at once. It neither sweeps.
func (s *Store) ensureIndexes(ctx context.Context, tool bool) error {
	// Every collection exists from the start, so that the embedded server's lookup indexes
	// (embedded.FerretDB.IndexIDs) can be made once, at start.
	names, err := s.db.ListCollectionNames(ctx, bson.M{})
	if err != nil {
		return fmt.Errorf("list collections: %w", err)
	}
	for _, c := range []string{colResults, colMsgIDs, colBindings, colFollowers, colKeys,
		colAuthRequests, colAuthCodes, colSessions, colConsents, colRefresh, colFamilies, colSessionIDs, colUserSessions, colRevokedGrants,
		colClients, colMeta} {
		if slices.Contains(names, c) {
			continue
		}
		if err := s.db.CreateCollection(ctx, c); err != nil {
			var ce mongo.CommandError
			if !errors.As(err, &ce) || ce.Code != 48 { // 48: NamespaceExists, another replica won
				return fmt.Errorf("create collection %s: %w", c, err)
			}
		}
	}
	if tool {
		return nil
	}
	secs := int32(s.retention / time.Second)
	for _, c := range []*mongo.Collection{s.results, s.msgIDs} {
		_, err := c.Indexes().CreateOne(ctx, mongo.IndexModel{
			Keys:    bson.D{{Key: "at", Value: 1}},
			Options: options.Index().SetName("at_ttl").SetExpireAfterSeconds(secs),
		})
		var ce mongo.CommandError
		if errors.As(err, &ce) && ce.Code == 85 { // IndexOptionsConflict: retention changed
			// MongoDB keeps an index's options: the new retention is set on the index there
			// is, rather than refused at every start.
			err = s.db.RunCommand(ctx, bson.D{{Key: "collMod", Value: c.Name()},
				{Key: "index", Value: bson.D{{Key: "name", Value: "at_ttl"}, {Key: "expireAfterSeconds", Value: secs}}}}).Err()
		}
		switch {
		case err == nil:
			s.ttl = true
		case isNotImplemented(err):
			// FerretDB has no TTL indexes; Sweep deletes in bounded batches. A plain index on
			// at would cost every insert and serve no query there (it filters only on _id).
			s.ttl = false
		default:
			return fmt.Errorf("create ttl index: %w", err)
		}
	}
	if !s.ttl {
		return nil
	}
	// On MongoDB the hourly sweep of sign-in records reads them by their expiry: an index
	// keeps it from scanning each collection. (FerretDB reads the whole table for such a
	// filter anyway: an index there would cost every insert and serve nothing.)
	for _, c := range signInCollections {
		if _, err := s.col(c).Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "expires", Value: 1}}}); err != nil {
			return fmt.Errorf("create index on %s.expires: %w", c, err)
		}
	}
	return nil
}

// signInCollections are the sign-in records Sweep drops once expired, by their expires field.
var signInCollections = []string{colAuthRequests, colAuthCodes, colSessions, colRefresh, colSessionIDs, colUserSessions, colRevokedGrants, colFamilies}

// renewedInPlace are the sign-in collections whose records a later write of the same _id
// renews (its expires moves on: a user's list of sessions at the next sign-in, a revocation of
// an application revoked again), each with the key of the store's users lock its writers hold.
var renewedInPlace = map[string]func(id string) string{
	colUserSessions:  func(id string) string { return id },
	colRevokedGrants: revokedGrantLock,
	colFamilies:      familyLock,
}

func revokedGrantLock(id string) string { return "grant\x00" + id }

func familyLock(id string) string { return "family\x00" + id }

func isNotImplemented(err error) bool {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return ce.Code == 238 || ce.Name == "NotImplemented"
	}
	return false
}

// SweepBatch bounds the records one step of Sweep deletes. Between steps Sweep pauses as long
// as the step took, and at least SweepPause, so that it takes at most half of the store's time
// and lookups and deliveries are never held up for long.
const (
	SweepBatch = 500
	SweepPause = 20 * time.Millisecond
)

// Sweep deletes delivery records older than the retention period, for servers without TTL
// indexes, and expired sign-in records. It returns how many documents it removed.
//
// Delivery records are swept oldest first, by one read of the table in its natural order,
// which is the order they were written (a query without a filter is the one the embedded server
// reads row by row, so the sweep reads each row it passes once), in steps of SweepBatch records
// whose expired ones are deleted by _id. A push's progress record is replaced in place: it keeps
// its early row with a later time, and stays at the head of the table while its push is retried
// (for days, in a platform outage). The sweep passes such live records and goes on behind them;
// it ends at any other live record, as the rest are newer.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	var n int64
	if !s.ttl {
		before := s.now().Add(-s.retention)
		for _, c := range []*mongo.Collection{s.results, s.msgIDs} {
			k, err := sweepOldest(ctx, c, before)
			n += k
			if err != nil {
				return n, fmt.Errorf("sweep %s: %w", c.Name(), err)
			}
		}
	}
	// Sign-in records are dropped once expired (a day later, so a replay is still recognised
	// as one for a while). A collection the store fails to sweep does not keep the others from
	// being swept.
	var errs []error
	cutoff := s.now().Add(-24 * time.Hour)
	refreshFailed := false
	for _, c := range signInCollections {
		if c == colFamilies && refreshFailed {
			// The families of the refresh tokens a failed sweep has not yet kept wait for
			// the next sweep, with their tokens.
			continue
		}
		k, err := s.sweepExpired(ctx, s.col(c), cutoff, renewedInPlace[c])
		n += k
		if err != nil {
			refreshFailed = refreshFailed || c == colRefresh
			errs = append(errs, fmt.Errorf("sweep %s: %w", c, err))
		}
	}
	return n, errors.Join(errs...)
}

// sweptRecord is what the sweep of delivery records reads of a record.
type sweptRecord struct {
	ID string    `bson:"_id"`
	At time.Time `bson:"at"`
}

// sweepOldest deletes the records of c written before before, from the head of the table (see
// Sweep), and returns how many it deleted.
func sweepOldest(ctx context.Context, c *mongo.Collection, before time.Time) (int64, error) {
	return sweepSteps(ctx, c, func(r sweptRecord) (expired, stop bool) {
		switch {
		case r.At.Before(before):
			return true, false
		case strings.HasSuffix(r.ID, suffixProgress):
			return false, false // a push still retried: its record keeps its early row
		}
		return false, true // the rest are newer
	})
}

// sweepSteps reads c once, in its natural order (the one read the embedded server makes row by
// row), in steps of SweepBatch records, and deletes by _id the records pick finds expired,
// pausing between steps as long as the step took, and at least SweepPause, so that a sweep takes
// at most half of the store's time. It stops at the end of the table, or at a record for which
// pick says stop. It returns how many records it deleted.
func sweepSteps(ctx context.Context, c *mongo.Collection, pick func(sweptRecord) (expired, stop bool)) (int64, error) {
	cur, err := c.Find(ctx, bson.D{}, options.Find().SetBatchSize(SweepBatch).SetProjection(bson.M{"_id": 1, "at": 1}))
	if err != nil {
		return 0, err
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var n int64
	for {
		t0 := time.Now()
		var expired []any
		more := true
		for i := 0; i < SweepBatch && more; i++ {
			if !cur.Next(ctx) {
				more = false
				break
			}
			var r sweptRecord
			if err := cur.Decode(&r); err != nil {
				return n, err
			}
			gone, stop := pick(r)
			if gone {
				expired = append(expired, r.ID)
			}
			more = !stop
		}
		k, err := deleteByID(ctx, c, expired)
		n += k
		if err := errors.Join(cur.Err(), err); err != nil || !more {
			return n, err
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(max(SweepPause, time.Since(t0))):
		}
	}
}

// deleteByID deletes the records of c with the given _ids, each by its _id (the one filter
// the embedded server reads from an index, and the one whose deletes take no SQL values
// together), SweepBatch in a command.
func deleteByID(ctx context.Context, c *mongo.Collection, ids []any) (int64, error) {
	return deleteEach(ctx, c, ids, func(id any) bson.D { return bson.D{{Key: "_id", Value: id}} })
}

// deleteEach deletes, for each of ids, the record of c that filter(id) names, SweepBatch in a
// command.
func deleteEach(ctx context.Context, c *mongo.Collection, ids []any, filter func(id any) bson.D) (int64, error) {
	var n int64
	for len(ids) > 0 {
		k := min(len(ids), SweepBatch)
		models := make([]mongo.WriteModel, k)
		for i, id := range ids[:k] {
			models[i] = mongo.NewDeleteOneModel().SetFilter(filter(id))
		}
		r, err := c.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		if err != nil {
			return n, err
		}
		n += r.DeletedCount
		ids = ids[k:]
	}
	return n, nil
}

// sweepPage bounds the expired sign-in records one read of sweepExpired finds: the embedded
// server reads the whole table for each such read.
const sweepPage = 100 * SweepBatch

// sweepExpired deletes the records of c that expired before cutoff: it reads up to sweepPage
// of their _ids at a time (on MongoDB by the index on expires) and deletes them by _id (the
// embedded server deletes the matches of one filter with one SQL statement, which takes at
// most 32,766 values). In a collection renewed in place (lock not nil), a record renewed since
// it was read stays (deleteIfExpired).
func (s *Store) sweepExpired(ctx context.Context, c *mongo.Collection, cutoff time.Time, lock func(id string) string) (int64, error) {
	var n int64
	for {
		// A record kept past its expiry (RefreshToken.Kept) stays until then.
		expired := bson.M{"expires": bson.M{"$lt": cutoff}, "kept": bson.M{"$not": bson.M{"$gte": cutoff}}}
		cur, err := c.Find(ctx, expired, options.Find().SetLimit(sweepPage).SetProjection(bson.M{"_id": 1, "session": 1, "family": 1, "userid": 1, "client": 1, "at": 1, "issued": 1}))
		if err != nil {
			return n, err
		}
		var docs []sweptSignIn
		if err := cur.All(ctx, &docs); err != nil {
			return n, err
		}
		var ids []any
		if c.Name() == colRefresh {
			if ids, err = s.keepTokensOfLiveSessions(ctx, docs); err != nil {
				return n, err
			}
		} else {
			for _, d := range docs {
				ids = append(ids, d.ID)
			}
		}
		var k int64
		if lock == nil {
			k, err = deleteByID(ctx, c, ids)
		} else {
			k, err = s.deleteIfExpired(ctx, c, ids, cutoff, lock)
		}
		n += k
		if err != nil || len(docs) < sweepPage {
			return n, err
		}
	}
}

// sweptSignIn is what the sweep reads of an expired sign-in record: of a refresh token (or its
// use), its session, family, user, client and when it was issued, besides its _id.
type sweptSignIn struct {
	ID      any       `bson:"_id"`
	Session string    `bson:"session"`
	Family  string    `bson:"family"`
	UserID  string    `bson:"userid"`
	Client  string    `bson:"client"`
	At      time.Time `bson:"at"`     // a token's issue
	Issued  time.Time `bson:"issued"` // a use's token's issue
}

// keepTokensOfLiveSessions returns the _ids of the refresh tokens and uses in docs to delete. A
// token's session may outlive the end it had when the token was issued (Kept): a sign-in again
// in the same browser renews the session in place. The token (and its use) of a session still
// live stays, kept with its family until that session's end, unless the user has revoked its
// client's access since it was issued: then it could end nothing (the server-side logout
// refuses it), and goes, before the revocation's record does (oauth.Service.RevokeGrant).
func (s *Store) keepTokensOfLiveSessions(ctx context.Context, docs []sweptSignIn) ([]any, error) {
	var del []any
	ends := map[string]time.Time{} // a session's end; zero when it is not live
	for _, d := range docs {
		end, read := ends[d.Session]
		if d.Session != "" && !read {
			switch se, err := s.Session(ctx, d.Session); {
			case err == nil:
				end = se.Expires
			case !errors.Is(err, ErrNotFound):
				return nil, fmt.Errorf("read the session of a refresh token: %w", err)
			}
			ends[d.Session] = end
		}
		if !end.IsZero() {
			issued := d.At
			if !d.Issued.IsZero() {
				issued = d.Issued
			}
			revoked, err := s.GrantRevokedAt(ctx, d.UserID, d.Client)
			if err != nil {
				return nil, fmt.Errorf("read the revocation of a refresh token's grant: %w", err)
			}
			if !revoked.IsZero() && !issued.After(revoked) {
				end = time.Time{}
			}
		}
		if end.IsZero() {
			del = append(del, d.ID)
			continue
		}
		if _, err := s.col(colRefresh).UpdateOne(ctx, bson.M{"_id": d.ID}, bson.M{"$max": bson.M{"kept": end}}); err != nil {
			return nil, fmt.Errorf("keep a refresh token of a live session: %w", err)
		}
		unlock := s.users.lock(familyLock(d.Family)) // the family's writers hold it (upsertFamily)
		_, err := s.col(colFamilies).UpdateOne(ctx, bson.M{"_id": d.Family}, bson.M{"$max": bson.M{"expires": end}})
		unlock()
		if err != nil {
			return nil, fmt.Errorf("keep the family of a refresh token of a live session: %w", err)
		}
	}
	return del, nil
}

// deleteIfExpired deletes the records of c with the given _ids that are still expired before
// cutoff. On MongoDB the delete's filter says so, through _id's index. The embedded server would
// scan the collection for such a filter, but it serves one process, whose writers of c hold the
// lock of the record (lock(_id) of the store's users): the record is read and deleted under it.
func (s *Store) deleteIfExpired(ctx context.Context, c *mongo.Collection, ids []any, cutoff time.Time, lock func(id string) string) (int64, error) {
	if s.ttl {
		return deleteEach(ctx, c, ids, func(id any) bson.D {
			return bson.D{{Key: "_id", Value: id}, {Key: "expires", Value: bson.M{"$lt": cutoff}}}
		})
	}
	var n int64
	for _, v := range ids {
		id, ok := v.(string)
		if !ok {
			continue // none is written so
		}
		k, err := func() (int64, error) {
			defer s.users.lock(lock(id))()
			var d struct {
				Expires time.Time `bson:"expires"`
			}
			switch err := s.getByID(ctx, c.Name(), id, &d); {
			case errors.Is(err, ErrNotFound):
				return 0, nil
			case err != nil:
				return 0, err
			case !d.Expires.Before(cutoff):
				return 0, nil // renewed since it was read
			}
			r, err := c.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
			if err != nil {
				return 0, err
			}
			return r.DeletedCount, nil
		}()
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// RunSweeper calls Sweep first after first, and then every interval until ctx ends: a process
// that lives less than an interval (restarted by a rolling update, or a standalone stack run for
// an hour's work) sweeps all the same. Delivery records also expire through TTL indexes where
// the server has them; expired sign-in records are always swept here.
func (s *Store) RunSweeper(ctx context.Context, first, interval time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(first):
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := s.Sweep(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.log.Warn("retention sweep failed", "err", err)
		case n > 0:
			s.log.Info("retention sweep", "deleted", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// maxUpdates bounds the updates and replacements of one command. For each statement of an
// update command that meets an existing document, the embedded FerretDB keeps one of its 100
// SQLite connections until the command ends: the statement that wants the 101st waits for good,
// and the server with it. Commands of 50 cost MongoDB nothing worth counting.
const maxUpdates = 50

// bulkWrite writes models in commands of at most maxUpdates, one after the other (in order,
// for an ordered o). It stops at the first command that fails.
func bulkWrite(ctx context.Context, c *mongo.Collection, models []mongo.WriteModel, o *options.BulkWriteOptions) error {
	for len(models) > 0 {
		n := min(len(models), maxUpdates)
		if _, err := c.BulkWrite(ctx, models[:n], o); err != nil {
			return err
		}
		models = models[n:]
	}
	return nil
}
