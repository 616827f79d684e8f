package service

import (
	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/oauth"
)

// The configuration holds plain values and knows nothing of the token service; these turn
// them into the token service's types.

// rateLimits returns the limits as the token service applies them.
func rateLimits(r config.RateLimits) oauth.RateLimits {
	return oauth.RateLimits{Disabled: r.Disabled, PerClient: r.PerClient, PerClientBurst: r.PerClientBurst,
		PerAddress: r.PerAddress, PerAddressBurst: r.PerAddressBurst}
}

// bruteForce returns the detection as the token service applies it.
func bruteForce(b config.BruteForce) oauth.BruteForce {
	return oauth.BruteForce{Disabled: b.Disabled, Failures: b.Failures, WaitIncrement: b.WaitIncrement.D(),
		MaxWait: b.MaxWait.D(), FailureReset: b.FailureReset.D(), QuickLoginCheck: b.QuickLoginCheck.D(),
		MinQuickLoginWait: b.MinQuickLoginWait.D()}
}

// directoryUsers returns the directory's users as the login form checks them.
func directoryUsers(d config.Directory) []oauth.DirectoryUser {
	out := make([]oauth.DirectoryUser, 0, len(d.Users))
	for _, u := range d.Users {
		out = append(out, oauth.DirectoryUser{UserID: u.UserID, Password: u.Password, PasswordHash: u.PasswordHash})
	}
	return out
}
