package oauth_test

// The relying-party libraries used by the sign-in tests, pinned here until those tests exist.
import (
	_ "github.com/coreos/go-oidc/v3/oidc"
	_ "golang.org/x/crypto/bcrypt"
	_ "golang.org/x/oauth2"
)
