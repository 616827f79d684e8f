package service

import (
	"slices"
	"testing"

	"github.com/campus-it/ucs/pkg/config"
	"github.com/campus-it/ucs/pkg/oauth"
)

// The configuration writes out the token service's vocabulary rather than importing it: a
// grant or scope added to one and not the other would be refused by the file, or registered
// and never granted.
func TestConfigVocabularyIsTheTokenServices(t *testing.T) {
	if !slices.Equal(config.KnownGrants, oauth.KnownGrants) {
		t.Errorf("config.KnownGrants %v, oauth.KnownGrants %v", config.KnownGrants, oauth.KnownGrants)
	}
	if !slices.Equal(config.KnownScopes, oauth.KnownScopes) {
		t.Errorf("config.KnownScopes %v, oauth.KnownScopes %v", config.KnownScopes, oauth.KnownScopes)
	}
}
