package oauth

import (
	"fmt"

	"golang.org/x/crypto/bcrypt"
)

// Directory is the built-in identity provider: the users of the configuration, each with a
// bcrypt hash of the password (a password given in clear text is hashed at start).
type Directory struct {
	hashes map[string][]byte
	// dummy is compared against for an unknown user, so that an unknown user number and a
	// wrong password take the same time.
	dummy []byte
}

// DirectoryUser is an account of the directory: a password in clear text (hashed at start) or
// its bcrypt hash.
type DirectoryUser struct {
	UserID, Password, PasswordHash string
}

// NewDirectory builds the directory.
func NewDirectory(users []DirectoryUser) (*Directory, error) {
	d := &Directory{hashes: make(map[string][]byte, len(users))}
	var err error
	if d.dummy, err = bcrypt.GenerateFromPassword([]byte("not a password of anyone"), bcrypt.DefaultCost); err != nil {
		return nil, err
	}
	for _, u := range users {
		h := []byte(u.PasswordHash)
		if u.Password != "" {
			if h, err = bcrypt.GenerateFromPassword([]byte(u.Password), bcrypt.DefaultCost); err != nil {
				return nil, fmt.Errorf("hash password of %s: %w", u.UserID, err)
			}
		} else if _, err := bcrypt.Cost(h); err != nil {
			return nil, fmt.Errorf("directory user %s: password_hash is not a bcrypt hash", u.UserID)
		}
		d.hashes[u.UserID] = h
	}
	return d, nil
}

// Check reports whether password is userID's.
func (d *Directory) Check(userID, password string) bool {
	h, ok := d.hashes[userID]
	if !ok {
		_ = bcrypt.CompareHashAndPassword(d.dummy, []byte(password))
		return false
	}
	return bcrypt.CompareHashAndPassword(h, []byte(password)) == nil
}

// Exists reports whether userID is a user of the directory: only those get a record of failed
// sign-ins, so that made-up names cost no memory or storage.
func (d *Directory) Exists(userID string) bool {
	_, ok := d.hashes[userID]
	return ok
}
