package oauth

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/campus-it/ucs/pkg/store"
)

// ClientsReload is how often every front end reads the registered clients again. A change an
// operator makes (a client created, disabled, enabled, its secret rotated, its token lifetime
// set) is seen by every replica within this, and the tokens of a disabled or removed client are
// refused from then on: comfortably inside the 10 s the operators are promised, with room for a
// slow read.
//
// Why a reload rather than a notification: clients are few (tens or hundreds), so reading them
// all is one small query every few seconds per replica on either server; it needs nothing but
// the store the admin commands already write to, and a replica that missed something (it was
// restarting, the queue was away) is right again at the next read, where a missed
// notification would leave it wrong until its restart.
const ClientsReload = 3 * time.Second

// ClientSource is where the registered clients are kept: *store.Store.
type ClientSource interface {
	Clients(ctx context.Context) ([]store.Client, error)
}

// RegistrationOf returns a stored client as the token service registers it.
func RegistrationOf(c store.Client) (Registration, error) {
	reg := Registration{
		ID: c.ID, Grants: c.Grants, Scopes: c.Scopes, RedirectURIs: c.RedirectURIs,
		PostLogoutRedirectURIs: c.PostLogoutRedirectURIs, SkipConsent: c.SkipConsent,
		AccessTokenTTL: time.Duration(c.AccessTokenTTL) * time.Second, Introspect: c.Introspect,
		RateLimit: c.RateLimit, IDTokenAlg: c.IDTokenAlg, RefreshTokens: c.RefreshTokens, Disabled: c.Disabled,
		BackchannelLogoutURI: c.BackchannelLogoutURI, BackchannelLogoutSessionRequired: c.BackchannelLogoutSessionRequired,
		TokensNotBefore: c.TokensNotBefore, Registered: c.Created,
	}
	b, err := hex.DecodeString(c.SecretSHA256)
	if err != nil || len(b) != len(reg.SecretHash) {
		return reg, fmt.Errorf("client %s: the stored secret hash is not 64 hex digits", c.ID)
	}
	copy(reg.SecretHash[:], b)
	return reg, nil
}

// Reload makes the clients of src the registry. A stored client that cannot be registered (a
// damaged record) is left out, and named in the error; the others are registered all the same.
func (r *Clients) Reload(ctx context.Context, src ClientSource) error {
	cs, err := src.Clients(ctx)
	if err != nil {
		return err
	}
	regs := make([]Registration, 0, len(cs))
	var bad []error
	for _, c := range cs {
		reg, err := RegistrationOf(c)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		regs = append(regs, reg)
	}
	r.Replace(regs)
	return errors.Join(bad...)
}

// Follow reloads the registry from src every interval until ctx ends. When a read fails the
// registry stays as it was (a store outage must not lock every client out), and the failure is
// logged once until a read succeeds again.
func (r *Clients) Follow(ctx context.Context, src ClientSource, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		err := r.Reload(rctx, src)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !failing:
			log.Warn("reloading the registered clients failed; the ones read last stay registered", "err", err)
			failing = true
		case err == nil && failing:
			log.Info("reloading the registered clients works again")
			failing = false
		}
	}
}
