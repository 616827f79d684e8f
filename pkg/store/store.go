// Package store keeps the service's state in MongoDB: the record of every push's delivery (an
// append-only log of events per ucsId, from which the current result is derived), the platform's
// delivery receipts, campus user bindings and signing keys.
//
// The delivery path only inserts, in batches: inserts are what both MongoDB and the embedded
// FerretDB do fastest, and an append-only record needs neither transactions nor read-modify-write.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
	"go.mongodb.org/mongo-driver/mongo/writeconcern"
)

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("not found")

// Collection names.
const (
	colEvents   = "push_events"
	colReceipts = "push_receipts"
	colBindings = "bindings"
	colKeys     = "signing_keys"
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
	// ConnectTimeout bounds the wait for the server at Open. Default 30s.
	ConnectTimeout time.Duration
}

// Store is the MongoDB store.
type Store struct {
	client   *mongo.Client
	db       *mongo.Database
	events   *mongo.Collection
	receipts *mongo.Collection
	bindings *mongo.Collection
	keys     *mongo.Collection
	now      func() time.Time
	log      *slog.Logger
	// ttl is true when the server expires records itself (a TTL index); otherwise Sweep must run.
	ttl       bool
	retention time.Duration
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
	// Majority writes: a result the service has reported survives the loss of a replica.
	opts := options.Client().ApplyURI(o.URI).
		SetWriteConcern(writeconcern.Majority()).
		SetMaxPoolSize(256).
		SetServerSelectionTimeout(o.ConnectTimeout)
	client, err := mongo.Connect(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to mongodb: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	if err := client.Ping(pctx, nil); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, fmt.Errorf("ping mongodb: %w", err)
	}
	db := client.Database(o.Database)
	s := &Store{
		client: client, db: db,
		events:    db.Collection(colEvents),
		receipts:  db.Collection(colReceipts),
		bindings:  db.Collection(colBindings),
		keys:      db.Collection(colKeys),
		now:       o.Now,
		log:       o.Logger,
		retention: o.Retention,
	}
	if err := s.ensureIndexes(ctx); err != nil {
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

func (s *Store) ensureIndexes(ctx context.Context) error {
	// Every collection exists from the start, so that the embedded server's lookup indexes
	// (embedded.FerretDB.IndexIDs) can be made once, at start.
	names, err := s.db.ListCollectionNames(ctx, bson.M{})
	if err != nil {
		return fmt.Errorf("list collections: %w", err)
	}
	for _, c := range []string{colEvents, colReceipts, colBindings, colKeys,
		colAuthRequests, colAuthCodes, colSessions, colConsents, colRefresh, colFamilies, colSessionIDs} {
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
	idx := []struct {
		c *mongo.Collection
		m mongo.IndexModel
	}{
		{s.bindings, mongo.IndexModel{Keys: bson.D{{Key: "openid", Value: 1}}, Options: options.Index().SetName("openid")}},
	}
	for _, i := range idx {
		if _, err := i.c.Indexes().CreateOne(ctx, i.m); err != nil {
			return fmt.Errorf("create index %s: %w", *i.m.Options.Name, err)
		}
	}
	secs := int32(s.retention / time.Second)
	for _, c := range []*mongo.Collection{s.events, s.receipts} {
		_, err := c.Indexes().CreateOne(ctx, mongo.IndexModel{
			Keys:    bson.D{{Key: "at", Value: 1}},
			Options: options.Index().SetName("at_ttl").SetExpireAfterSeconds(secs),
		})
		switch {
		case err == nil:
			s.ttl = true
		case isNotImplemented(err):
			// FerretDB has no TTL indexes: a plain index keeps Sweep's deletes cheap.
			s.ttl = false
			if _, err := c.Indexes().CreateOne(ctx, mongo.IndexModel{
				Keys: bson.D{{Key: "at", Value: 1}}, Options: options.Index().SetName("at"),
			}); err != nil {
				return fmt.Errorf("create index at: %w", err)
			}
		default:
			return fmt.Errorf("create ttl index: %w", err)
		}
	}
	return nil
}

func isNotImplemented(err error) bool {
	var ce mongo.CommandError
	if errors.As(err, &ce) {
		return ce.Code == 238 || ce.Name == "NotImplemented"
	}
	return false
}

// Sweep deletes delivery records older than the retention period, for servers without TTL
// indexes. It returns how many documents it removed.
func (s *Store) Sweep(ctx context.Context) (int64, error) {
	before := s.now().Add(-s.retention)
	var n int64
	for _, c := range []*mongo.Collection{s.events, s.receipts} {
		r, err := c.DeleteMany(ctx, bson.M{"at": bson.M{"$lt": before}})
		if err != nil {
			return n, fmt.Errorf("sweep %s: %w", c.Name(), err)
		}
		n += r.DeletedCount
	}
	// Sign-in records are dropped once expired (a day later, so a replay is still recognised
	// as one for a while).
	for _, c := range []string{colAuthRequests, colAuthCodes, colSessions, colRefresh, colSessionIDs} {
		r, err := s.col(c).DeleteMany(ctx, bson.M{"expires": bson.M{"$lt": s.now().Add(-24 * time.Hour)}})
		if err != nil {
			return n, fmt.Errorf("sweep %s: %w", c, err)
		}
		n += r.DeletedCount
	}
	return n, nil
}

// RunSweeper calls Sweep every interval until ctx ends. Delivery records also expire through
// TTL indexes where the server has them; expired sign-in records are always swept here.
func (s *Store) RunSweeper(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := s.Sweep(ctx)
			if err != nil {
				s.log.Warn("retention sweep failed", "err", err)
			} else if n > 0 {
				s.log.Info("retention sweep", "deleted", n)
			}
		}
	}
}
