package service

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/campus-it/ucs/pkg/announce"
	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/oauth"
	"github.com/campus-it/ucs/pkg/platform"
	"github.com/campus-it/ucs/pkg/server"
	"github.com/campus-it/ucs/pkg/store"
)

// buildBind configures the binding page: it needs the platform account (its web
// authorization) and a campus sign-in; nil when either is missing.
func buildBind(ctx context.Context, cfg *config.Config, st *store.Store, d Deps, nc *nats.Conn, signIn *server.SignIn) (*server.Bind, error) {
	if signIn == nil || cfg.Platform.APIBase == "" {
		return nil, nil
	}
	wa, err := platform.NewWebAuth(platform.WebAuthConfig{
		OAuthBase: cfg.Platform.OAuthBase, APIBase: cfg.Platform.APIBase,
		AppID: cfg.Platform.AppID, Secret: cfg.Platform.Secret, HTTPClient: d.HTTPClient,
	})
	if err != nil {
		return nil, err
	}
	// The sign-in's key, shared by every replica through the store; the purposes keep a value
	// sealed for one use from opening for another.
	key, err := st.SharedSecret(ctx, "auth-requests", oauth.NewSealingKey)
	if err != nil {
		return nil, err
	}
	sessions, err := oauth.NewSealer(key, "bind session")
	if err != nil {
		return nil, err
	}
	tickets, err := oauth.NewSealer(key, "bind sign-in")
	if err != nil {
		return nil, err
	}
	return &server.Bind{Store: st, Platform: wa, Sessions: sessions, Tickets: tickets,
		Changed: func(userID string) { announce.BindingChanged(nc, userID) }}, nil
}
