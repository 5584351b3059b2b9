package peerauth

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Report logs which ring a service runs with and exports it as the gauge
// seqflow_peer_auth_insecure (1 with InsecureNone, else 0) on reg. The
// insecure mode is logged at error level on every start, so it cannot go
// unnoticed.
func Report(k *Keyring, log *slog.Logger, reg prometheus.Registerer) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "seqflow_peer_auth_insecure",
		Help: "1 when the push transport runs unauthenticated (SEQFLOW_PEER_AUTH=insecure-none): anyone who reaches the push port or Redis can push to gateways and teach them members.",
	})
	if k.IsInsecure() {
		g.Set(1)
		log.Error("PUSH TRANSPORT UNAUTHENTICATED: " + EnvAuth + "=" + InsecureNone + "; anyone who reaches the push port or Redis can forge pushes and membership. Set " + EnvKeysFile + " for any deployment others can reach")
	} else {
		log.Info("push transport authenticated", "peer_signing_key", k.SigningID(), "peer_keys", len(k.ids))
	}
	reg.MustRegister(g)
}
