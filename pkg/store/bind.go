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
// stale owner, and no write needs a transaction. The writes that undo a binding or a claim
// name the very one they undo (its follower or user number, and its time), so that one another
// replica made meanwhile stays: on MongoDB through _id's index; the embedded FerretDB scans the
// collection for such a filter (about 3.5 s for 100,000 bindings, BenchmarkBindMoveAmong100k),
// which only moves and unbinds on the binding page pay.

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
// Without transactions the binding is written first (what delivery reads), then the follower's
// record is made to point to it by one findAndModify that returns the user number it pointed
// to before, whose binding to this follower is then removed. Each Bind thus removes the
// binding of the one before it, written before that one's pointer was set: when two replicas
// bind one follower to two user numbers at the same instant, the later pointer's binding
// stays, and the other is removed. A lock per openid and per user number orders two pages of
// one process (the standalone stack, whose FerretDB reads and then writes a findAndModify).
func (s *Store) Bind(ctx context.Context, userID, openID string) (replaced string, err error) {
	old, replaced, err := s.bind(ctx, userID, openID)
	if err == nil && old.OpenID != "" && old.OpenID != openID {
		// The user number's former follower no longer points here (reads check anyway), under
		// that follower's lock, taken once the new one's is let go.
		defer s.followers.lock(old.OpenID)()
		s.clearOwner(ctx, old)
	}
	return replaced, err
}

// bind is Bind but for clearing the pointer of the user number's former follower: old is the
// user number's binding before.
func (s *Store) bind(ctx context.Context, userID, openID string) (old Binding, replaced string, err error) {
	defer s.followers.lock(openID)()
	defer s.users.lock("bind\x00" + userID)()
	now := s.now()
	prior, err := s.Binding(ctx, userID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Binding{}, "", err
	}
	if err := s.PutBinding(ctx, Binding{UserID: userID, OpenID: openID, Updated: now}); err != nil {
		return Binding{}, "", err
	}
	// A follower record made here says "following", as no record at all does: whether the
	// openid follows is the platform's subscribe and unsubscribe events' to say.
	upd := bson.M{"$set": bson.M{"userid": userID, "bound": now}, "$setOnInsert": bson.M{"following": true, "updated": now}}
	var f followerOwner
	claim := func() error {
		return s.col(colFollowers).FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: openID}}, upd,
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.Before)).Decode(&f)
	}
	err = claim()
	if mongo.IsDuplicateKeyError(err) {
		err = claim() // another replica inserted the record first: it is there now
	}
	if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return Binding{}, "", fmt.Errorf("bind follower: %w", err)
	}
	if f.UserID != "" && f.UserID != userID {
		switch prev, err := s.Binding(ctx, f.UserID); {
		case err == nil && prev.OpenID == openID:
			gone, err := s.removeBinding(ctx, prev)
			if err != nil {
				// The follower now points to userID, and a Bind again would not see f.UserID:
				// an operator must remove that binding.
				s.log.Error("binding a follower left the binding of its previous user number in place; remove it",
					"userid", f.UserID, "openid", openID, "bound_to", userID, "err", err)
				return Binding{}, "", fmt.Errorf("unbind the previous user: %w", err)
			}
			if gone {
				replaced = f.UserID
			}
		case err != nil && !errors.Is(err, ErrNotFound):
			return Binding{}, "", err
		}
	}
	return prior, replaced, nil
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
	switch gone, err := s.removeBinding(ctx, b); {
	case err != nil:
		return fmt.Errorf("unbind: %w", err)
	case !gone:
		return ErrNotFound // bound again elsewhere since it was read: that binding stays
	}
	s.clearOwner(ctx, b)
	return nil
}

// removeBinding deletes binding b if it is still the binding of its user number, as it was
// read: the same follower, written at the same time. A binding another replica wrote since
// (the user number bound again, to this follower or another) stays, and gone is false.
func (s *Store) removeBinding(ctx context.Context, b Binding) (gone bool, err error) {
	var updated any = b.Updated
	if b.Updated.IsZero() {
		updated = bson.M{"$exists": false} // written before bindings kept their time
	}
	res, err := s.bindings.DeleteOne(ctx,
		bson.D{{Key: "_id", Value: b.UserID}, {Key: "openid", Value: b.OpenID}, {Key: "updated", Value: updated}})
	if err != nil {
		return false, err
	}
	return res.DeletedCount == 1, nil
}

// clearOwner removes the pointer to binding b from the followers record of b.OpenID if that
// claim is still there, in one conditional write: the user number and the time of the claim,
// which Bind writes to both records. Another replica's claim made meanwhile stays, whether of
// another user number or of the same one bound again. (A filter on more than _id: FerretDB scans
// for it, for this rare change, and the caller holds the follower's lock in the one process
// FerretDB serves.) Best effort: a pointer left behind is ignored by BindingOf, which checks
// the binding.
func (s *Store) clearOwner(ctx context.Context, b Binding) {
	_, err := s.col(colFollowers).UpdateOne(ctx,
		bson.D{{Key: "_id", Value: b.OpenID}, {Key: "userid", Value: b.UserID}, {Key: "bound", Value: b.Updated}},
		bson.M{"$unset": bson.M{"userid": "", "bound": ""}})
	if err != nil {
		s.log.Warn("clearing a follower's binding failed; reads ignore it", "err", err)
	}
}
