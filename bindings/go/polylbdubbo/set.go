package polylbdubbo

import (
	"time"

	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/protocol/base"

	polylb "github.com/polylb/polylb/bindings/go"
)

// maxAliases bounds the older Invoker objects kept per provider (see
// invokerSet.byObj).
const maxAliases = 4

// invokerSet is one generation of a service's providers, immutable once
// published. Position i is polylb's invoker ids[i].
type invokerSet struct {
	gen     uint64
	members []base.Invoker // the newest object of each provider, in set order
	ids     []uint64
	keys    []string // identity (protocol://ip:port/path) per position
	plb     []polylb.Invoker
	// byMethod holds, for each method some provider weighs on its own
	// ("methods.<m>.weight") differently from the service, the set with that
	// method's weights; its calls are balanced over it (weightsFor).
	byMethod map[string][]polylb.Invoker

	// byObj maps every object known for a provider to its position: the
	// member and up to maxAliases older objects of the same provider. A
	// registry refresh replaces Invoker objects while calls may still hold
	// the previous list, and two references to one service hold distinct
	// objects for the same providers: both must map to the provider without
	// rebuilding the set.
	byObj map[base.Invoker]int
	// byURL maps each known object's URL to its position: the filter sees the
	// protocol's invoker, not the directory's wrapper, but they share the URL.
	byURL map[*common.URL]int
	byID  map[uint64]int
	byKey map[string]int
}

// position is the provider position of an object of the call's list.
func (s *invokerSet) position(inv base.Invoker) (int, bool) {
	pos, ok := s.byObj[inv]
	return pos, ok
}

// positionOfURL is the position of the provider at u (a filter's invoker).
func (s *invokerSet) positionOfURL(u *common.URL) (int, bool) {
	if pos, ok := s.byURL[u]; ok {
		return pos, true
	}
	pos, ok := s.byKey[identity(u)]
	return pos, ok
}

// sameMembers reports whether list is exactly the set's members, in order:
// the common case (a directory's whole list), checked with n compares.
func (s *invokerSet) sameMembers(list []base.Invoker) bool {
	if len(list) != len(s.members) {
		return false
	}
	for i, inv := range list {
		if inv != s.members[i] {
			return false
		}
	}
	return true
}

// destroyed reports whether inv was destroyed (its provider left the
// registry, or its reference was destroyed): dubbo-go's BaseInvoker.Destroy,
// which every protocol's invoker calls, drops the URL, and the filter chain's
// wrappers return the wrapped invoker's. Unavailable is not destroyed: a
// provider whose connection is down is still the registry's and comes back.
func destroyed(inv base.Invoker) bool { return inv.GetURL() == nil }

// nextSet builds the set that covers list: list's providers (a new object
// of a known provider replacing the member, unless it is unavailable while
// the member is not), then the old members that list does not hold and that
// are not destroyed (a routed subset, or a reselect without the unavailable
// ones, must not drop the others' state), then aliases. Ids stay with their providers; new providers get fresh ids from
// *nextID. now is the clock for warm-up parameters; identity names each
// member (serviceState.memberKey).
func nextSet(old *invokerSet, list []base.Invoker, nextID *uint64, now time.Time, identity func(*common.URL) string) *invokerSet {
	s := &invokerSet{
		byObj: make(map[base.Invoker]int, len(list)),
		byURL: make(map[*common.URL]int, len(list)),
		byID:  make(map[uint64]int, len(list)),
		byKey: make(map[string]int, len(list)),
	}
	if old != nil {
		s.gen = old.gen + 1
	}
	aliases := make(map[int]int) // position -> aliases kept
	alias := func(inv base.Invoker, pos int) {
		if _, known := s.byObj[inv]; known || aliases[pos] >= maxAliases {
			return
		}
		u := inv.GetURL()
		if u == nil {
			return // destroyed
		}
		aliases[pos]++
		s.byObj[inv] = pos
		s.byURL[u] = pos
	}
	var urls []*common.URL // each member's URL, read once: it may be dropped meanwhile
	add := func(inv base.Invoker, key string, u *common.URL) {
		id := uint64(0)
		if old != nil {
			if pos, ok := old.byKey[key]; ok {
				id = old.ids[pos]
			}
		}
		if id == 0 {
			*nextID++
			id = *nextID
		}
		pos := len(s.members)
		s.members = append(s.members, inv)
		s.ids = append(s.ids, id)
		s.keys = append(s.keys, key)
		urls = append(urls, u)
		s.byObj[inv] = pos
		s.byURL[u] = pos
		s.byID[id] = pos
		s.byKey[key] = pos
	}
	for _, inv := range list {
		u := inv.GetURL()
		if u == nil {
			continue // destroyed (a late call's list): never a member
		}
		key := identity(u)
		pos, seen := s.byKey[key]
		if !seen {
			if old != nil && !inv.IsAvailable() {
				// An unavailable object in a late call's list must not
				// replace a live member of the same provider.
				if op, ok := old.byKey[key]; ok && old.members[op].IsAvailable() {
					if ou := old.members[op].GetURL(); ou != nil {
						add(old.members[op], key, ou)
						alias(inv, s.byKey[key])
						continue
					}
				}
			}
			add(inv, key, u)
			continue
		}
		alias(inv, pos) // the list repeats a provider
	}
	if old != nil {
		for i, inv := range old.members {
			if _, kept := s.byKey[old.keys[i]]; !kept {
				if u := inv.GetURL(); u != nil { // not destroyed
					add(inv, old.keys[i], u)
				}
			}
		}
		for inv, oldPos := range old.byObj {
			if pos, ok := s.byKey[old.keys[oldPos]]; ok && s.members[pos] != inv && !destroyed(inv) {
				alias(inv, pos)
			}
		}
	}
	s.plb = make([]polylb.Invoker, len(s.members))
	named := map[string]bool{}
	for i, u := range urls {
		s.plb[i] = providerInvoker(s.ids[i], u, now, "")
		methodsWithWeights(u, named)
	}
	for method := range named {
		own, differs := make([]polylb.Invoker, len(urls)), false
		for i, u := range urls {
			own[i] = s.plb[i]
			if w := weightOf(u, method); w != s.plb[i].Weight {
				own[i] = providerInvoker(s.ids[i], u, now, method)
				differs = true
			}
		}
		if differs {
			if s.byMethod == nil {
				s.byMethod = map[string][]polylb.Invoker{}
			}
			s.byMethod[method] = own
		}
	}
	return s
}

// asGroups makes the members of a multi-group reference's groups (see
// stateKey) what a group is as a whole: a group's cluster invoker carries its
// first provider's URL, whose start and zone are that provider's, not the
// group's. Read as the group's, a group whose first provider had just
// restarted was warmed up with it (at 30 s of 600, 13 of 600 calls instead of
// 200), and with polylb.config's zone the groups were chosen by where their
// first providers run. The weight stays the one dubbo-go's own balancers give
// a group (its URL's weight); they warm up no group (remote.timestamp is never
// set), and the Java adapter gives a cluster invoker no warm-up. Within the
// group, its providers warm up and keep their zones.
func (s *invokerSet) asGroups() {
	strip := func(ws []polylb.Invoker) {
		for i := range ws {
			ws[i].StartTimeMs, ws[i].WarmupMs, ws[i].Zone = 0, 0, ""
		}
	}
	strip(s.plb)
	for _, ws := range s.byMethod {
		strip(ws)
	}
}

// weightsFor is the set as calls of method weigh it ("": the service's).
func (s *invokerSet) weightsFor(method string) []polylb.Invoker {
	if own, ok := s.byMethod[method]; ok {
		return own
	}
	return s.plb
}
