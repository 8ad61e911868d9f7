package lbcore

// Carry maps the services of a new configuration to those of the one it
// replaces by identity (Service.ID: the hash of hashId, else of address), so
// that what a running filter knows about a service (its health, its active
// requests, its persistence entries) follows the service, not its position in
// the list. A service whose name or weight changed is the same service; one
// whose address changed without a hashId is a new one.
//
// Its fields are exported as one record, whether or not a package outside
// reads each one.
type Carry struct {
	// From[i] is the previous position of new service i, or -1 for a
	// service the previous configuration did not have.
	From []int
	// Removed are the previous positions of the services the new
	// configuration lacks, in order.
	Removed []int
}

// carryOver compares prev and next by identity. Identities are unique within
// a valid configuration (Validate refuses duplicates).
func carryOver(prev, next []Service) Carry {
	at := make(map[uint64]int, len(prev))
	for i := range prev {
		at[prev[i].ID] = i
	}
	return carry(at, len(prev), next)
}

// Carry is carryOver from the configuration b was built from to next,
// with the index of identities b already has: no map is built.
func (b *Balancer) Carry(next []Service) Carry { return carry(b.ids, len(b.services), next) }

func carry(at map[uint64]int, prev int, next []Service) Carry {
	c := Carry{From: make([]int, len(next))}
	kept := make([]bool, prev)
	for i := range next {
		j, ok := at[next[i].ID]
		if !ok {
			c.From[i] = -1
			continue
		}
		c.From[i], kept[j] = j, true
	}
	for j, k := range kept {
		if !k {
			c.Removed = append(c.Removed, j)
		}
	}
	return c
}

// Added returns the positions of the new services, in order.
func (c *Carry) Added() []int {
	var out []int
	for i, j := range c.From {
		if j < 0 {
			out = append(out, i)
		}
	}
	return out
}

// CarryValues returns, in the new configuration's order, the previous
// value of every kept service and the zero value for a new one.
func CarryValues[T any](c *Carry, prev []T) []T {
	out := make([]T, len(c.From))
	for i, j := range c.From {
		if j >= 0 && j < len(prev) {
			out[i] = prev[j]
		}
	}
	return out
}
