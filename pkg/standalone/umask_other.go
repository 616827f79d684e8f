//go:build !unix

package standalone

// restrictUmask does nothing where there is no umask: the data folder's own permissions keep
// others out.
func restrictUmask() {}
