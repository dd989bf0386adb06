package api

import (
	"net/http"
	"strings"
)

// Route is one operation of the API.
type Route struct {
	Method string
	// Pattern is the path as the OpenAPI document writes it: /v1/sandboxes/{id}. A last
	// segment {name...} takes the rest of the path, slashes included.
	Pattern string
	// Scope the key needs; "" for a public route, scopeAny for any valid key.
	Scope string
	// Also are further scopes the key needs: a route that reads one kind of record and
	// writes another needs both.
	Also []string
	// Graph says the route needs ?graph=.
	Graph bool
	// Audit says the call changes state and goes into the audit trail.
	Audit   bool
	Handler handlerFunc
}

const scopeAny = "*"

// router matches a request to a route. Where several match, the one with a literal segment
// earliest wins, so /v1/sandboxes/templates beats /v1/sandboxes/{id}, whatever the order
// routes were added in (net/http's mux would refuse some of the API's pairs as conflicts).
type router struct {
	routes []*Route
}

type segKind int

const (
	segRest segKind = iota
	segParam
	segLiteral
)

func splitPath(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}

// match reports whether path matches pattern, with the kind of each matched segment and the
// parameters.
func match(pattern, path string) ([]segKind, map[string]string, bool) {
	ps, xs := splitPath(pattern), splitPath(path)
	var kinds []segKind
	params := map[string]string{}
	for i, p := range ps {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "...}") {
			if i >= len(xs) || xs[i] == "" {
				return nil, nil, false
			}
			params[p[1:len(p)-4]] = strings.Join(xs[i:], "/")
			return append(kinds, segRest), params, true
		}
		if i >= len(xs) {
			return nil, nil, false
		}
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			if xs[i] == "" {
				return nil, nil, false
			}
			params[p[1:len(p)-1]] = xs[i]
			kinds = append(kinds, segParam)
			continue
		}
		if p != xs[i] {
			return nil, nil, false
		}
		kinds = append(kinds, segLiteral)
	}
	if len(xs) != len(ps) {
		return nil, nil, false
	}
	return kinds, params, true
}

func better(a, b []segKind) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return len(a) > len(b)
}

// find returns the route for a request and its path parameters; when the path matches only
// under other methods, it returns those methods instead.
func (rt *router) find(method, path string) (*Route, map[string]string, []string) {
	var best *Route
	var bestKinds []segKind
	var bestParams map[string]string
	var allowed []string
	for _, r := range rt.routes {
		kinds, params, ok := match(r.Pattern, path)
		if !ok {
			continue
		}
		if r.Method != method && !(method == http.MethodHead && r.Method == http.MethodGet) {
			allowed = append(allowed, r.Method)
			continue
		}
		if best == nil || better(kinds, bestKinds) {
			best, bestKinds, bestParams = r, kinds, params
		}
	}
	return best, bestParams, allowed
}
