package simulator

// Recent returns up to n of the latest accepted sends to openid, newest first. It reads from
// the newest back and copies only what it returns, so that a page polling it stays cheap
// however many sends the simulator keeps.
func (s *Simulator) Recent(openid string, n int) []SentMessage {
	var out []SentMessage
	s.mu.Lock()
	for i := len(s.sent) - 1; i >= 0 && len(out) < n; i-- {
		if s.sent[i].ToUser == openid {
			out = append(out, s.sent[i])
		}
	}
	s.mu.Unlock()
	for i := range out {
		out[i].Data = copyData(out[i].Data)
	}
	return out
}
