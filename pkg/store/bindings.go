package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/bson"
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
	OpenID    string    `bson:"_id"`
	Following bool      `bson:"following"`
	Updated   time.Time `bson:"updated"`
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
		b.Following = f.Following
	case errors.Is(err, ErrNotFound):
		b.Following = true
	default:
		return b, err
	}
	return b, nil
}

// SetFollowing records that openid follows the official account or not, as the platform's
// subscribe and unsubscribe events report; every binding of the openid follows that.
func (s *Store) SetFollowing(ctx context.Context, openID string, following bool) error {
	_, err := s.col(colFollowers).ReplaceOne(ctx, bson.D{{Key: "_id", Value: openID}},
		follower{OpenID: openID, Following: following, Updated: s.now()}, options.Replace().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("set following: %w", err)
	}
	return nil
}
