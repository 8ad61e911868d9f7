package fleet

import "time"

// budget is a worker's create budget: rate creates per second, a burst of
// one second's worth, on the monotonic clock (clock). A token is taken when
// a create is sent and given back when the key turned out to exist; the
// ledger accounts for each.
type budget struct {
	rate   int
	tokens float64
	at     time.Time // the last refill
	ledger ledger
}

// newBudget is a full budget of rate creates per second at mono.
func newBudget(rate int, mono time.Time) budget {
	return budget{rate: rate, tokens: float64(rate), at: mono}
}

// spend takes one create token at mono, if there is one.
func (b *budget) spend(mono time.Time) bool {
	b.refill(mono)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	b.ledger.spent++
	return true
}

// refill adds the tokens earned since the last refill.
func (b *budget) refill(mono time.Time) {
	rate := float64(b.rate)
	if dt := mono.Sub(b.at); dt > 0 {
		b.tokens = min(rate, b.tokens+rate*dt.Seconds())
		b.at = mono
	}
}

// overHalf reports whether, at mono, more than half the budget is left:
// syncs that create take tokens only then, leaving the other half to
// misses.
func (b *budget) overHalf(mono time.Time) bool {
	b.refill(mono)
	return b.tokens >= 1+float64(b.rate)/2
}

// The create tokens' ledger: each token spent (spend) is held by one
// transaction or sync (fleetOp.held, fleetJob.held) until it is, exactly
// once, refunded (the key existed: nothing grew etcd), consumed (the
// create was applied) or dropped (its outcome is unknown, or it was given
// up: counted as grown). So spent = refunded + consumed + dropped + held.
type ledger struct{ spent, refunded, consumed, dropped uint64 }

// refund gives back the token *held holds, if it holds one.
func (b *budget) refund(held *bool) {
	if *held {
		*held = false
		b.ledger.refunded++
		b.tokens = min(float64(b.rate), b.tokens+1)
	}
}

// consume marks the token *held holds as spent on a create applied.
func (b *budget) consume(held *bool) {
	if *held {
		*held = false
		b.ledger.consumed++
	}
}

// drop gives up the token *held holds: it stays spent.
func (b *budget) drop(held *bool) {
	if *held {
		*held = false
		b.ledger.dropped++
	}
}
