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

// Binding ties a campus user number to the official account's follower id (openid), and says
// whether that follower still follows the account.
type Binding struct {
	UserID    string    `bson:"_id"`
	OpenID    string    `bson:"openid"`
	Following bool      `bson:"-"`
	Updated   time.Time `bson:"updated"`
}

// follower is what the platform's subscribe and unsubscribe events say of an openid. It is
// kept apart from bindings, keyed by the openid the events carry, so that an event is one write
// by _id; a binding whose openid has no follower record is taken as following.
type follower struct {
	OpenID string `bson:"_id"`
	// Order is the newest event applied: its CreateTime in seconds times two, plus one for a
	// subscribe. Events are applied with $max of it, so an older event that arrives after a
	// newer one changes nothing, and within one second a subscribe outranks an unsubscribe:
	// the platform itself then refuses a send to a user who left (43004), whereas a wrong
	// "unsubscribed" would fail the user's messages without asking.
	Order int64 `bson:"order,omitempty"`
	// Following is the state of records written before events were ordered (no Order).
	Following bool      `bson:"following,omitempty"`
	Updated   time.Time `bson:"updated"`
}

func (f follower) following() bool {
	if f.Order != 0 {
		return f.Order&1 == 1
	}
	return f.Following
}

// PutBinding creates or replaces the binding of b.UserID. b.Following is not stored: whether
// the openid follows is the platform's to say (SetFollowing).
func (s *Store) PutBinding(ctx context.Context, b Binding) error {
	if b.Updated.IsZero() {
		b.Updated = s.now()
	}
	_, err := s.bindings.ReplaceOne(ctx, bson.D{{Key: "_id", Value: b.UserID}}, b, options.Replace().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("put binding: %w", err)
	}
	return nil
}

// Binding returns the binding of a campus user number with its follower state, or
// ErrNotFound. It reads the binding, then the follower record of its openid.
func (s *Store) Binding(ctx context.Context, userID string) (Binding, error) {
	var b Binding
	if err := s.getByID(ctx, colBindings, userID, &b); err != nil {
		return b, err
	}
	var f follower
	switch err := s.getByID(ctx, colFollowers, b.OpenID, &f); {
	case err == nil:
		b.Following = f.following()
	case errors.Is(err, ErrNotFound):
		b.Following = true
	default:
		return b, err
	}
	return b, nil
}

// SetFollowing records that openid follows the official account or not, as the platform's
// subscribe or unsubscribe event created at `at` reports; every binding of the openid follows
// that. Events are applied in the order of their creation, whatever the order they arrive in:
// an event older than the one recorded changes nothing. at must be after 1970.
//
// Why $max on one document filtered by _id alone, rather than an update conditioned on the
// stored time or a read then a write: the embedded FerretDB answers only an exact {_id} filter
// from an index (a condition on a second field reads the whole collection), and it has no
// transactions. $max needs neither: MongoDB applies it to the document atomically; FerretDB
// reads and then writes, and serves a single process (the standalone stack), where a lock per
// openid closes that gap.
func (s *Store) SetFollowing(ctx context.Context, openID string, following bool, at time.Time) error {
	order := at.Unix() * 2
	if following {
		order++
	}
	defer s.followers.lock(openID)()
	set := func() error {
		_, err := s.col(colFollowers).UpdateOne(ctx, bson.D{{Key: "_id", Value: openID}},
			bson.M{"$max": bson.M{"order": order, "updated": s.now()}}, options.Update().SetUpsert(true))
		return err
	}
	err := set()
	if mongo.IsDuplicateKeyError(err) {
		// Two first events of an openid on two replicas both tried to insert its record; the
		// loser finds it there when it tries again (MongoDB's advice for upserts).
		err = set()
	}
	if err != nil {
		return fmt.Errorf("set following: %w", err)
	}
	return nil
}
