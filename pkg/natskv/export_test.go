package natskv

import "time"

// SetBucketCheck sets how often watches look at their bucket, until the returned func is called.
func SetBucketCheck(d time.Duration) (restore func()) {
	old := bucketCheck
	bucketCheck = d
	return func() { bucketCheck = old }
}
