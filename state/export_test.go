package state

// AdoptBodies gives the items whose bodies s holds itself the body
// references of the same items in from, as Relocate records would: so that
// a state decoded from an old snapshot can be compared with one decoded
// from a new one.
func (s *State) AdoptBodies(from *State) {
	for id := range s.inline {
		if e, o := s.items.get(id), from.items.get(id); e != nil && o != nil {
			e.body = o.body
		}
	}
	s.inline = nil
}

// DeletePasses is how many queue deletes passed over every item.
func (s *State) DeletePasses() int { return s.deletePasses }
