package lbcore

import "github.com/cespare/xxhash/v2"

// What the fleet level (package fleet) asks of the services: their identity
// in fleet records, and the service of an identity. *Balancer satisfies
// fleet.Services.

// serviceKey is the service's identity in fleet records: hashId or address.
func (s *Service) serviceKey() string {
	if s.HashID != "" {
		return s.HashID
	}
	return s.Address
}

// ServiceByKey returns the index of the service whose serviceKey is key.
func (b *Balancer) ServiceByKey(key string) (int, bool) {
	i, ok := b.ids[xxhash.Sum64String(key)]
	if ok && b.services[i].serviceKey() != key {
		return 0, false
	}
	return i, ok
}

// FleetService is service i's identity in fleet records (serviceKey).
func (b *Balancer) FleetService(i int) string { return b.services[i].serviceKey() }
