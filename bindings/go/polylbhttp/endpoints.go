package polylbhttp

import (
	"fmt"
	"maps"
	"net/url"
	"strings"

	polylb "github.com/polylb/polylb/bindings/go"
)

// Endpoint is one HTTP server the Transport balances requests over.
type Endpoint struct {
	// URL is the server's base, scheme://host[:port], e.g.
	// "http://10.0.0.1:8080": a request keeps its path and query and takes
	// this scheme and host. It is also the endpoint's identity: an Update that
	// lists the same URL keeps the endpoint's state (calls in flight, latency
	// estimates, ejection), and it is the address the stats show and the
	// hashing strategies place.
	URL string
	// Weight is polylb's weight. 0 means polylb's default, 100 (so that an
	// Endpoint literal with only a URL is a normal endpoint); to stop sending
	// to an endpoint, leave it out of the set. Negative weights are refused.
	Weight int32
	// Zone is the endpoint's zone, for a config with zone=<this client's
	// zone> (docs/strategies.md); "" is none.
	Zone string
}

// target is where requests to one endpoint go.
type target struct {
	scheme, host string
}

// endpointSet maps the ids the balancer may return to their targets. It is
// never modified once published.
type endpointSet struct {
	byID map[uint64]target
}

// endpointKey checks an endpoint's URL and returns its canonical form (the
// key of its id) and its target.
func endpointKey(raw string) (string, target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", target{}, err
	}
	// A base path would have to be joined to every request's path, escapes
	// and all; nothing needs it yet, so it is refused rather than ignored.
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", target{}, fmt.Errorf("URL %q: scheme must be http or https", raw)
	case u.Host == "":
		return "", target{}, fmt.Errorf("URL %q: no host", raw)
	case u.User != nil, u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "", u.Opaque != "":
		return "", target{}, fmt.Errorf("URL %q: want scheme://host[:port] only (no user, path, query or fragment)", raw)
	}
	host := strings.ToLower(u.Host)
	return u.Scheme + "://" + host, target{scheme: u.Scheme, host: host}, nil
}

// plannedSet is an Update's new set, built before the balancer sees it.
type plannedSet struct {
	invokers []polylb.Invoker
	ids      map[string]uint64
	byID     map[uint64]target
	nextID   uint64
}

// plan gives each endpoint its id: the one it had if its URL is in ids, else
// a new one after lastID (ids are never reused, so a select that returns an
// id of a set just replaced can never be taken for another endpoint).
func plan(endpoints []Endpoint, ids map[string]uint64, lastID uint64) (plannedSet, error) {
	p := plannedSet{
		invokers: make([]polylb.Invoker, 0, len(endpoints)),
		ids:      make(map[string]uint64, len(endpoints)),
		byID:     make(map[uint64]target, len(endpoints)),
		nextID:   lastID,
	}
	for i, ep := range endpoints {
		key, tgt, err := endpointKey(ep.URL)
		if err != nil {
			return plannedSet{}, fmt.Errorf("polylbhttp: endpoint %d: %w", i, err)
		}
		if _, dup := p.ids[key]; dup {
			return plannedSet{}, fmt.Errorf("polylbhttp: endpoint %d: %s is listed twice", i, key)
		}
		if ep.Weight < 0 {
			return plannedSet{}, fmt.Errorf("polylbhttp: endpoint %d (%s): negative weight %d", i, key, ep.Weight)
		}
		id, kept := ids[key]
		if !kept {
			p.nextID++
			id = p.nextID
		}
		p.ids[key] = id
		p.byID[id] = tgt
		inv := polylb.NewInvoker(id, key)
		if ep.Weight != 0 {
			inv.Weight = ep.Weight
		}
		inv.Zone = ep.Zone
		p.invokers = append(p.invokers, inv)
	}
	return p, nil
}

// union is the set to publish while the balancer switches from old to next:
// a select then may return an id of either.
func union(old *endpointSet, next map[uint64]target) *endpointSet {
	byID := maps.Clone(next)
	maps.Copy(byID, old.byID)
	return &endpointSet{byID: byID}
}
