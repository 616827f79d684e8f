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
	Following bool      `bson:"following"`
	Updated   time.Time `bson:"updated"`
}

// PutBinding creates or replaces the binding of b.UserID.
func (s *Store) PutBinding(ctx context.Context, b Binding) error {
	if b.Updated.IsZero() {
		b.Updated = s.now()
	}
	_, err := s.bindings.ReplaceOne(ctx, bson.M{"_id": b.UserID}, b, options.Replace().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("put binding: %w", err)
	}
	return nil
}

// Binding returns the binding of a campus user number, or ErrNotFound.
func (s *Store) Binding(ctx context.Context, userID string) (Binding, error) {
	var b Binding
	err := s.bindings.FindOne(ctx, bson.M{"_id": userID}).Decode(&b)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return b, ErrNotFound
	}
	if err != nil {
		return b, fmt.Errorf("find binding: %w", err)
	}
	return b, nil
}

// SetFollowing marks every binding of openid as following or not, as the platform's
// subscribe and unsubscribe events report. It returns how many bindings changed.
func (s *Store) SetFollowing(ctx context.Context, openID string, following bool) (int64, error) {
	r, err := s.bindings.UpdateMany(ctx, bson.M{"openid": openID},
		bson.M{"$set": bson.M{"following": following, "updated": s.now()}})
	if err != nil {
		return 0, fmt.Errorf("update bindings: %w", err)
	}
	return r.ModifiedCount, nil
}
