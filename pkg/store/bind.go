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

// A student binds their campus account on the binding page: the page knows the follower
// (openid, from the platform) before it knows the user number, so it must find a binding by
// openid as well. The followers record of the openid keeps the user number bound to it; the
// binding (keyed by user number, which the workers read) stays the one truth, and a user
// number in a followers record counts only while the binding of that user number names the
// same openid. So a binding changed elsewhere (the configuration, an operator) never shows a
// stale owner, and no write needs a transaction or a filter on anything but _id.

// followerOwner is the part of a followers record that the binding page reads and writes.
type followerOwner struct {
	OpenID string    `bson:"_id"`
	UserID string    `bson:"userid,omitempty"`
	Bound  time.Time `bson:"bound,omitempty"`
}

// BindingOf returns the binding of openid (with its follower state), or ErrNotFound when no
// user number is bound to it.
func (s *Store) BindingOf(ctx context.Context, openID string) (Binding, error) {
	var f followerOwner
	if err := s.getByID(ctx, colFollowers, openID, &f); err != nil {
		return Binding{}, err
	}
	if f.UserID == "" {
		return Binding{}, ErrNotFound
	}
	b, err := s.Binding(ctx, f.UserID)
	if err != nil {
		return Binding{}, err
	}
	if b.OpenID != openID {
		return Binding{}, ErrNotFound // the user number was bound to another follower since
	}
	return b, nil
}

// Bind binds userID to openID, as the student asked on the binding page: the user number's
// earlier binding (to another follower) is replaced, and so is the user number the follower
// was bound to before (one campus account per follower). It returns the user number whose
// binding it removed that way, or "".
//
// Without transactions the writes go in an order that leaves nothing wrong if one fails: the
// binding first (what delivery reads), then the follower's record that points back to it. A
// lock per openid and per user number orders two pages of one process (the standalone
// stack); across replicas, two students binding one follower at the same instant end with
// the later write, which is what either of them asked for.
func (s *Store) Bind(ctx context.Context, userID, openID string) (replaced string, err error) {
	defer s.followers.lock(openID)()
	defer s.users.lock("bind\x00" + userID)()
	now := s.now()
	var f followerOwner
	switch err := s.getByID(ctx, colFollowers, openID, &f); {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return "", err
	}
	if f.UserID != "" && f.UserID != userID {
		switch prev, err := s.Binding(ctx, f.UserID); {
		case err == nil && prev.OpenID == openID:
			if _, err := s.bindings.DeleteOne(ctx, bson.D{{Key: "_id", Value: f.UserID}}); err != nil {
				return "", fmt.Errorf("unbind the previous user: %w", err)
			}
			replaced = f.UserID
		case err != nil && !errors.Is(err, ErrNotFound):
			return "", err
		}
	}
	old, err := s.Binding(ctx, userID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return "", err
	}
	if err := s.PutBinding(ctx, Binding{UserID: userID, OpenID: openID, Updated: now}); err != nil {
		return "", err
	}
	// A follower record made here says "following", as no record at all does: whether the
	// openid follows is the platform's subscribe and unsubscribe events' to say.
	upd := bson.M{"$set": bson.M{"userid": userID, "bound": now}, "$setOnInsert": bson.M{"following": true, "updated": now}}
	if err := s.upsertFollower(ctx, openID, upd); err != nil {
		return "", err
	}
	if old.OpenID != "" && old.OpenID != openID {
		// The user number's former follower no longer points here; reads check anyway.
		s.clearOwner(ctx, old.OpenID, userID)
	}
	return replaced, nil
}

// Unbind removes the binding of userID to openID; ErrNotFound when userID is not bound to
// that openid (bound to another, or not at all), and then nothing changes.
func (s *Store) Unbind(ctx context.Context, userID, openID string) error {
	defer s.followers.lock(openID)()
	defer s.users.lock("bind\x00" + userID)()
	b, err := s.Binding(ctx, userID)
	if err != nil {
		return err
	}
	if b.OpenID != openID {
		return ErrNotFound
	}
	if _, err := s.bindings.DeleteOne(ctx, bson.D{{Key: "_id", Value: userID}}); err != nil {
		return fmt.Errorf("unbind: %w", err)
	}
	s.clearOwner(ctx, openID, userID)
	return nil
}

// upsertFollower applies upd to the followers record of openID, creating it if needed.
func (s *Store) upsertFollower(ctx context.Context, openID string, upd bson.M) error {
	set := func() error {
		_, err := s.col(colFollowers).UpdateOne(ctx, bson.D{{Key: "_id", Value: openID}}, upd, options.Update().SetUpsert(true))
		return err
	}
	err := set()
	if mongo.IsDuplicateKeyError(err) {
		err = set() // another replica inserted the record first: it is there now
	}
	if err != nil {
		return fmt.Errorf("bind follower: %w", err)
	}
	return nil
}

// clearOwner removes userID from the followers record of openID if it is still there. Best
// effort: a pointer left behind is ignored by BindingOf, which checks the binding.
func (s *Store) clearOwner(ctx context.Context, openID, userID string) {
	var f followerOwner
	if err := s.getByID(ctx, colFollowers, openID, &f); err != nil || f.UserID != userID {
		return
	}
	_, err := s.col(colFollowers).UpdateOne(ctx, bson.D{{Key: "_id", Value: openID}}, bson.M{"$unset": bson.M{"userid": "", "bound": ""}})
	if err != nil {
		s.log.Warn("clearing a follower's binding failed; reads ignore it", "err", err)
	}
}
