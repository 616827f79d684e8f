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
