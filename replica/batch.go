package replica

// A batch entry carries the commands proposed together (group commit:
// Node.proposeQueued): batchVersion, their count as a uvarint, then each
// command length-prefixed. Applying it answers a batchReply, one Reply per
// command.

const (
	batchVersion = 2    // first byte of a batch entry (a command's is commandVersion)
	maxBatch     = 1024 // commands per entry
)

type batchReply []Reply

// applyBatch applies a batch entry's commands in order.
func (f *FSM) applyBatch(data []byte) any {
	d := decoder{b: data[1:]}
	n := d.uvarint()
	if d.bad || n > maxBatch {
		return Reply{Err: ErrBadCommand}
	}
	replies := make(batchReply, n)
	var c Command
	for i := range replies {
		one := d.bytes()
		if d.bad {
			replies[i].Err = ErrBadCommand
			continue
		}
		if err := DecodeCommand(one, &c); err != nil || c.Op == OpRestamp {
			replies[i].Err = ErrBadCommand
			continue
		}
		replies[i] = f.applyCommand(&c)
	}
	return replies
}
