package server

import (
	"time"

	"golang.org/x/sync/semaphore"
)

// SetBatchRoom gives s room for size bytes of batch bodies at once, waited for at most wait.
// Call it before s serves a request.
func SetBatchRoom(s *Server, size int64, wait time.Duration) {
	s.batchRoom, s.batchRoomSize, s.batchRoomWait = semaphore.NewWeighted(size), size, wait
	s.clientRooms.Clear()
}

// BatchRoomFree reports whether s's batch room has n bytes free, and no batch waits for room.
func BatchRoomFree(s *Server, n int64) bool {
	if !s.batchRoom.TryAcquire(n) {
		return false
	}
	s.batchRoom.Release(n)
	return true
}
