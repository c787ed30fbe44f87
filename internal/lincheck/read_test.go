package lincheck

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestReadSeesAcknowledged: a read after the other operations fits only
// the state they leave: a grant, a renewal or a release acknowledged
// before it must show in it; one of unknown outcome may or may not.
func TestReadSeesAcknowledged(t *testing.T) {
	const tok = "00000000000000070000000000000001"
	grant := porcupine.Operation{ClientId: 1, Input: Input{Op: 'l', Key: "k", Token: "1-0"}, Call: 0, Return: 1,
		Output: Output{OK: true, Token: tok, Fence: 7}}
	renew := porcupine.Operation{ClientId: 1, Input: Input{Op: 'n', Key: "k", Token: tok}, Call: 2, Return: 3, Output: Output{OK: true}}
	release := porcupine.Operation{ClientId: 1, Input: Input{Op: 'r', Key: "k", Token: tok}, Call: 4, Return: 5, Output: Output{OK: true}}
	read := func(held bool, fence uint64, renewed bool) porcupine.Operation {
		return porcupine.Operation{ClientId: 2, Input: Input{Op: 'g', Key: "k"}, Call: 10, Return: 11,
			Output: Output{OK: held, Fence: fence, Renewed: renewed}}
	}
	unknown := func(op porcupine.Operation) porcupine.Operation {
		op.Output, op.Return = Output{Unknown: true}, 1<<62
		return op
	}
	for _, c := range []struct {
		name string
		h    []porcupine.Operation
		ok   bool
	}{
		{"granted, read held", []porcupine.Operation{grant, read(true, 7, false)}, true},
		{"granted, read free", []porcupine.Operation{grant, read(false, 0, false)}, false},
		{"granted, read another fence", []porcupine.Operation{grant, read(true, 8, false)}, false},
		{"renewed, read renewed", []porcupine.Operation{grant, renew, read(true, 7, true)}, true},
		{"renewed, read not renewed", []porcupine.Operation{grant, renew, read(true, 7, false)}, false},
		{"renew unknown, read either", []porcupine.Operation{grant, unknown(renew), read(true, 7, false)}, true},
		{"released, read held", []porcupine.Operation{grant, renew, release, read(true, 7, true)}, false},
		{"released, read free", []porcupine.Operation{grant, renew, release, read(false, 0, false)}, true},
		{"release unknown, read held", []porcupine.Operation{grant, unknown(release), read(true, 7, false)}, true},
		{"grant unknown, read a fence", []porcupine.Operation{unknown(grant), read(true, 9, false)}, true},
		{"grant unknown, read free", []porcupine.Operation{unknown(grant), read(false, 0, false)}, true},
		{"nothing, read held", []porcupine.Operation{read(true, 3, false)}, false},
	} {
		if got := porcupine.CheckOperations(Model.ToModel(), c.h); got != c.ok {
			t.Errorf("%s: linearizable = %v; want %v", c.name, got, c.ok)
		}
	}
}
