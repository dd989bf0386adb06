package control

import (
	"context"

	"github.com/littlebigbrain/lbb/internal/errdefs"

	"github.com/littlebigbrain/lbb/internal/hostagent"
	"github.com/littlebigbrain/lbb/internal/store"
)

// ListHosts lists the hosts of a fleet (lbb serve --host-agent naming several) as last
// recorded: state, capacity, last heartbeat. A server with one host agent has none.
func (s *Service) ListHosts(ctx context.Context) ([]store.Host, error) {
	hosts, err := s.st.ListHosts(ctx)
	if hosts == nil {
		hosts = []store.Host{}
	}
	return hosts, err
}

// hostOf is the host of a fleet that holds sandbox id, for its record; "" with one host agent.
func (s *Service) hostOf(id string) string {
	if l, ok := s.host.(hostagent.Locator); ok {
		return l.HostOf(id)
	}
	return ""
}

// RegisterHost takes a joining host's registration (lbb host --control) when hosts join this
// control plane (lbb serve --hosts remote); token is the host's.
func (s *Service) RegisterHost(ctx context.Context, token string, r hostagent.Registration) (hostagent.Registered, error) {
	reg, ok := s.host.(hostagent.Registrar)
	if !ok {
		return hostagent.Registered{}, errdefs.New(errdefs.ClassNotFound, "hosts_listed", "hosts do not join this control plane: start it with --hosts remote")
	}
	return reg.Register(ctx, token, r)
}
