package server

// AnswersOnLoop reports whether s runs its node's answers on its event
// loop (answers.go).
func AnswersOnLoop(s *Server) bool { return s.answerQ.Load() != nil }
