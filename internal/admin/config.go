package admin

import "github.com/seqflow/seqflow/internal/config"

// The variables every service's admin server reads.
const (
	EnvTokensFile = "SEQFLOW_ADMIN_TOKENS_FILE"
	EnvPprof      = "SEQFLOW_ADMIN_PPROF"
)

// Config is what an admin server reads from the environment, the same in
// every service.
type Config struct {
	// TokensFile: SEQFLOW_ADMIN_TOKENS_FILE, the operators' bearer tokens,
	// one "name:token" per line (Tokens), default none: every operator
	// endpoint then answers 403 operator_auth_off, naming this variable.
	TokensFile string
	// Pprof: SEQFLOW_ADMIN_PPROF, serve Go's profiles under /debug/pprof/
	// (behind the tokens like every operator endpoint), default false: 404.
	Pprof bool
}

// LoadConfig reads Config from e.
func LoadConfig(e *config.Env) Config {
	return Config{
		TokensFile: e.Optional("SEQFLOW_ADMIN_TOKENS_FILE", ""),
		Pprof:      e.Bool("SEQFLOW_ADMIN_PPROF", false),
	}
}
