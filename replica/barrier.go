package replica

import (
	"context"
	"errors"

	"github.com/latchd/latchd/backend"
)

// Barrier is ReadBarrier in the backend's terms: *backend.NotLeaderError
// when no leader is known (or the node is stopping), ctx's error when the
// leader's confirmation or the apply did not come in time.
func (n *Node) Barrier(ctx context.Context) error {
	err := n.ReadBarrier(ctx)
	if errors.Is(err, ErrClosed) {
		return &backend.NotLeaderError{}
	}
	return backendErr(err)
}
