package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// ErrExists is returned when a record to create exists already.
var ErrExists = errors.New("already exists")

// Client sources: where a client record came from.
const (
	// SourceConfig: the configuration file's oauth.clients, loaded at every start.
	SourceConfig = "config"
	// SourceAdmin: created with `api admin clients create`.
	SourceAdmin = "admin"
)

// Client is a registered client application as the store keeps it. The secret is kept only as
// its SHA-256: the secrets are high-entropy values, so a hash that is fast to compare (in
// constant time) protects them as well as a slow one would.
type Client struct {
	ID string `bson:"_id" json:"client_id"`
	// SecretSHA256 is the hex SHA-256 of the secret.
	SecretSHA256           string   `bson:"secret_sha256" json:"-"`
	Grants                 []string `bson:"grants" json:"grants"`
	Scopes                 []string `bson:"scopes" json:"scopes"`
	RedirectURIs           []string `bson:"redirect_uris,omitempty" json:"redirect_uris,omitempty"`
	PostLogoutRedirectURIs []string `bson:"post_logout_redirect_uris,omitempty" json:"post_logout_redirect_uris,omitempty"`
	SkipConsent            bool     `bson:"skip_consent,omitempty" json:"skip_consent,omitempty"`
	// AccessTokenTTL is the client's token lifetime in seconds; 0: the service's default.
	AccessTokenTTL int64   `bson:"access_token_ttl,omitempty" json:"access_token_ttl,omitempty"`
	Introspect     bool    `bson:"introspect,omitempty" json:"introspect,omitempty"`
	RateLimit      float64 `bson:"rate_limit,omitempty" json:"rate_limit,omitempty"`
	IDTokenAlg     string  `bson:"id_token_alg,omitempty" json:"id_token_signed_response_alg,omitempty"`
	RefreshTokens  *bool   `bson:"refresh_tokens,omitempty" json:"refresh_tokens,omitempty"`
	// BackchannelLogoutURI is where the client is told that a session it received tokens in
	// ended (OpenID Connect Back-Channel Logout 1.0); empty: not told.
	BackchannelLogoutURI string `bson:"backchannel_logout_uri,omitempty" json:"backchannel_logout_uri,omitempty"`
	// BackchannelLogoutSessionRequired: the client needs sid in logout tokens (always sent).
	BackchannelLogoutSessionRequired bool `bson:"backchannel_logout_session_required,omitempty" json:"backchannel_logout_session_required,omitempty"`
	// Disabled clients get no token, and the tokens they have are refused.
	Disabled bool `bson:"disabled,omitempty" json:"disabled"`
	// Source is SourceConfig or SourceAdmin.
	Source string `bson:"source" json:"source"`
	// ConfigDigest identifies the configuration entry a SourceConfig record was last loaded
	// from (a SHA-256 over its fields, the secret only as its hash): a start whose file says
	// the same leaves the record, and what the admin commands changed in it, alone.
	ConfigDigest string `bson:"config_digest,omitempty" json:"-"`
	// TokensNotBefore refuses the tokens issued before it (to the millisecond): set when the
	// client is created (a deleted client's tokens do not pass for a new one of the same id),
	// each time it is disabled (enabling it again does not bring its old tokens back), and when
	// it is enabled again (nor those a front end issued before it read the disable).
	TokensNotBefore time.Time `bson:"tokens_not_before,omitempty" json:"tokens_not_before,omitzero"`
	Created         time.Time `bson:"created" json:"created"`
	Updated         time.Time `bson:"updated" json:"updated"`
	SecretRotated   time.Time `bson:"secret_rotated,omitempty" json:"secret_rotated,omitzero"`
}

// Clients returns every client, in the order they were first stored. It reads the whole
// collection: clients are few (a campus has tens or hundreds), so each front end reloads them
// all every few seconds rather than following changes one by one.
func (s *Store) Clients(ctx context.Context) ([]Client, error) {
	cur, err := s.col(colClients).Find(ctx, bson.D{})
	if err != nil {
		return nil, fmt.Errorf("read clients: %w", err)
	}
	var out []Client
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("read clients: %w", err)
	}
	return out, nil
}

// Client returns the client id, or ErrNotFound.
func (s *Store) Client(ctx context.Context, id string) (Client, error) {
	var c Client
	err := s.getByID(ctx, colClients, id, &c)
	return c, err
}

// CreateClient stores a new client, or returns ErrExists.
func (s *Store) CreateClient(ctx context.Context, c Client) error {
	now := s.now()
	c.Created, c.Updated, c.TokensNotBefore = now, now, now
	if _, err := s.col(colClients).InsertOne(ctx, c); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return ErrExists
		}
		return fmt.Errorf("create client: %w", err)
	}
	return nil
}

// ClientChange is what UpdateClient changes; nil fields stay as they are.
type ClientChange struct {
	Disabled       *bool
	SecretSHA256   *string
	AccessTokenTTL *int64
}

// disableSeenWithin bounds the time after a client's disable (by the clock of whoever disabled
// it) in which a front end may still issue it tokens: front ends read the clients every 3 s
// (oauth.ClientsReload), and replicas' clocks may differ by up to 15 s.
const disableSeenWithin = 18 * time.Second

// disableSeen is the tokens_not_before of a client enabled again at now, disabled at
// disabled: the tokens issued while front ends had not yet read the disable stay refused, and
// those a front end whose clock is behind issues once it read the enable are not.
func disableSeen(disabled, now time.Time) time.Time {
	if disabled.IsZero() {
		return now
	}
	if seen := disabled.Add(disableSeenWithin); seen.Before(now) {
		return seen
	}
	return now
}

// UpdateClient applies change to the client id and returns the client as it is now, or
// ErrNotFound.
func (s *Store) UpdateClient(ctx context.Context, id string, change ClientChange) (Client, error) {
	now := s.now()
	set := bson.M{"updated": now}
	if change.Disabled != nil {
		set["disabled"] = *change.Disabled
		if *change.Disabled {
			set["tokens_not_before"] = now
		} else {
			// Enabled again: the tokens a front end issued while it had not yet read the
			// disable (clients are reloaded every few seconds) stay refused as well.
			var c Client
			switch err := s.getByID(ctx, colClients, id, &c); {
			case errors.Is(err, ErrNotFound):
				return c, ErrNotFound
			case err != nil:
				return c, fmt.Errorf("update client: %w", err)
			case c.Disabled:
				set["tokens_not_before"] = disableSeen(c.TokensNotBefore, now)
			}
		}
	}
	if change.SecretSHA256 != nil {
		set["secret_sha256"] = *change.SecretSHA256
		set["secret_rotated"] = now
	}
	if change.AccessTokenTTL != nil {
		set["access_token_ttl"] = *change.AccessTokenTTL
	}
	var c Client
	err := s.col(colClients).FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: id}}, bson.M{"$set": set},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&c)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return c, ErrNotFound
	}
	if err != nil {
		return c, fmt.Errorf("update client: %w", err)
	}
	return c, nil
}

// DeleteClient removes the client id, or returns ErrNotFound. The users' consents to it go
// first (as Keycloak's do): a filter on the client, or on the end of _id for the records of
// earlier versions, which scans the consents, for this rare change. (Consent ignores a
// consent older than the client anyway: one written meanwhile by a replica that did not yet
// know of the deletion counts for nothing once an application registers under the id again.)
func (s *Store) DeleteClient(ctx context.Context, id string) error {
	filter := bson.M{"$or": bson.A{bson.M{"client": id}, bson.M{"_id": bson.M{"$regex": "\\|" + regexp.QuoteMeta(id) + "$"}}}}
	if _, err := s.col(colConsents).DeleteMany(ctx, filter); err != nil {
		return fmt.Errorf("delete the consents to client %s: %w", id, err)
	}
	r, err := s.col(colClients).DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return fmt.Errorf("delete client: %w", err)
	}
	if r.DeletedCount == 0 {
		return ErrNotFound
	}
	return nil
}

// SyncConfigClients makes the clients of the configuration file (SourceConfig records, each
// with its ConfigDigest) the ones the store holds, as every start does:
//   - a client not stored yet is stored;
//   - a stored client whose file entry changed since it was last loaded (another digest) takes
//     the file's fields, and keeps whether an operator disabled it;
//   - a stored client whose entry is unchanged is left alone, so that a secret an operator
//     rotated or a lifetime they set survives restarts until the file's entry changes;
//   - a SourceConfig client no longer in the file is removed (an admin-created one stays).
//
// Replicas starting together do the same writes, which converge.
func (s *Store) SyncConfigClients(ctx context.Context, cs []Client) error {
	stored, err := s.Clients(ctx)
	if err != nil {
		return err
	}
	byID := make(map[string]Client, len(stored))
	for _, c := range stored {
		byID[c.ID] = c
	}
	inFile := make(map[string]bool, len(cs))
	now := s.now()
	for _, c := range cs {
		inFile[c.ID] = true
		c.Source = SourceConfig
		old, ok := byID[c.ID]
		switch {
		case !ok:
			c.Created, c.Updated, c.TokensNotBefore = now, now, now
			_, err = s.col(colClients).InsertOne(ctx, c)
			if mongo.IsDuplicateKeyError(err) {
				err = nil // another replica stored the same entry at the same moment
			}
		case old.ConfigDigest != c.ConfigDigest || old.Source != SourceConfig:
			c.Disabled, c.Created, c.Updated, c.TokensNotBefore = old.Disabled, old.Created, now, old.TokensNotBefore
			_, err = s.col(colClients).ReplaceOne(ctx, bson.D{{Key: "_id", Value: c.ID}}, c)
		}
		if err != nil {
			return fmt.Errorf("store client %s: %w", c.ID, err)
		}
	}
	for _, c := range stored {
		if c.Source == SourceConfig && !inFile[c.ID] {
			if err := s.DeleteClient(ctx, c.ID); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
		}
	}
	return nil
}
