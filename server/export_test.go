package server

// AnswersOnLoop reports whether s runs its node's answers on its event
// loop (answers.go), and how many tasks the loop has run for them.
func AnswersOnLoop(s *Server) (on bool, tasks uint64) {
	q := s.answerQ.Load()
	if q == nil || !q.on.Load() {
		return false, 0
	}
	return true, q.ran.Load()
}
