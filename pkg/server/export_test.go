package server

import (
	"time"

	"golang.org/x/sync/semaphore"
)

// SetBatchRoom gives s room for size bytes of batch bodies at once, waited for at most wait.
// Call it before s serves a request.
func SetBatchRoom(s *Server, size int64, wait time.Duration) {
	s.batchRoom, s.batchRoomSize, s.batchRoomWait = semaphore.NewWeighted(size), size, wait
}
