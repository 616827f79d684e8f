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

// SigningKey is a token signing key as stored: the private key in PKCS #8 DER.
type SigningKey struct {
	KeyID   string    `bson:"kid"`
	Alg     string    `bson:"alg"`
	PKCS8   []byte    `bson:"pkcs8"`
	Created time.Time `bson:"created"`
}

type keySlot struct {
	ID  string     `bson:"_id"`
	Key SigningKey `bson:"key"`
}

// CurrentSigningKey returns the signing key of alg; when none exists yet it stores the one
// generate makes. Replicas starting together all get the same key: the first insert wins.
func (s *Store) CurrentSigningKey(ctx context.Context, alg string, generate func() (SigningKey, error)) (SigningKey, error) {
	var slot keySlot
	err := s.keys.FindOne(ctx, bson.M{"_id": "current:" + alg}).Decode(&slot)
	if err == nil {
		return slot.Key, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return SigningKey{}, fmt.Errorf("find signing key: %w", err)
	}
	k, err := generate()
	if err != nil {
		return SigningKey{}, err
	}
	err = s.keys.FindOneAndUpdate(ctx, bson.M{"_id": "current:" + alg},
		bson.M{"$setOnInsert": bson.M{"key": k}},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&slot)
	if mongo.IsDuplicateKeyError(err) {
		// Another replica inserted at the same moment: read what it stored.
		err = s.keys.FindOne(ctx, bson.M{"_id": "current:" + alg}).Decode(&slot)
	}
	if err != nil {
		return SigningKey{}, fmt.Errorf("store signing key: %w", err)
	}
	return slot.Key, nil
}

// PreviousSigningKey returns the key that signed before the current one, or ErrNotFound.
func (s *Store) PreviousSigningKey(ctx context.Context, alg string) (SigningKey, error) {
	var slot keySlot
	err := s.keys.FindOne(ctx, bson.M{"_id": "previous:" + alg}).Decode(&slot)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return SigningKey{}, ErrNotFound
	}
	if err != nil {
		return SigningKey{}, fmt.Errorf("find previous signing key: %w", err)
	}
	return slot.Key, nil
}

// RotateSigningKey makes next the current key of alg and old (the current one the caller saw)
// the previous one. The previous slot is written first, so that a replica reloading in between
// still verifies tokens of old. When another replica rotated first, nothing changes and false
// is returned.
func (s *Store) RotateSigningKey(ctx context.Context, alg string, old, next SigningKey) (bool, error) {
	if _, err := s.keys.ReplaceOne(ctx, bson.M{"_id": "previous:" + alg}, keySlot{ID: "previous:" + alg, Key: old},
		options.Replace().SetUpsert(true)); err != nil {
		return false, fmt.Errorf("store previous signing key: %w", err)
	}
	r, err := s.keys.UpdateOne(ctx, bson.M{"_id": "current:" + alg, "key.kid": old.KeyID}, bson.M{"$set": bson.M{"key": next}})
	if err != nil {
		return false, fmt.Errorf("rotate signing key: %w", err)
	}
	return r.ModifiedCount == 1, nil
}

type secretSlot struct {
	ID     string `bson:"_id"`
	Secret []byte `bson:"secret"`
}

// SharedSecret returns the random secret of name, shared by every replica: the first replica
// to ask stores generate's value, the others read it.
func (s *Store) SharedSecret(ctx context.Context, name string, generate func() []byte) ([]byte, error) {
	id := "secret:" + name
	var slot secretSlot
	err := s.keys.FindOne(ctx, bson.M{"_id": id}).Decode(&slot)
	if err == nil {
		return slot.Secret, nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("find secret %s: %w", name, err)
	}
	_, err = s.keys.InsertOne(ctx, secretSlot{ID: id, Secret: generate()})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return nil, fmt.Errorf("store secret %s: %w", name, err)
	}
	// Read back what won: this replica's insert, or another's at the same moment.
	if err := s.keys.FindOne(ctx, bson.M{"_id": id}).Decode(&slot); err != nil {
		return nil, fmt.Errorf("find secret %s: %w", name, err)
	}
	return slot.Secret, nil
}
