package seal

import (
	"os"

	"github.com/conch-sh/conch/services/internal/platform/config"
)

// Settings a KeyConfig is read from, as errors name them.
const (
	FlagKeyFile = "--secrets-key-file"
	EnvKey      = "CONCH_SECRETS_KEY"
)

// KeyConfig says where a service that stores secrets finds its keyring: a
// file (--secrets-key-file), or the keyring itself in CONCH_SECRETS_KEY (in
// Kubernetes, from a Secret). Both hold the text form of the package doc.
type KeyConfig struct {
	SecretsKeyFile string `flag:"secrets-key-file" env:"CONCH_SECRETS_KEY_FILE" usage:"file of the keys that seal stored secrets: id:base64key lines (32-byte keys), the first seals, all open"`
	SecretsKey     string `env:"CONCH_SECRETS_KEY" usage:"the keys that seal stored secrets, as in --secrets-key-file (keys may also be separated by commas)"`
}

// Given reports whether a keyring is configured.
func (c *KeyConfig) Given() bool { return c.SecretsKeyFile != "" || c.SecretsKey != "" }

// Validate requires a keyring, from one of the two places, and checks it.
func (c *KeyConfig) Validate() error {
	if !c.Given() {
		return config.Invalid(EnvKey, "set %s or %s: the keys that seal stored secrets (see docs/how-to/secrets.md in the conch repository)", EnvKey, FlagKeyFile)
	}
	_, err := c.Keyring()
	return err
}

// Keyring reads and parses the configured keyring. Errors name the setting
// at fault.
func (c *KeyConfig) Keyring() (*Keyring, error) {
	switch {
	case c.SecretsKeyFile != "" && c.SecretsKey != "":
		return nil, config.Invalid(FlagKeyFile, "set either %s or %s, not both", FlagKeyFile, EnvKey)
	case c.SecretsKeyFile != "":
		b, err := os.ReadFile(c.SecretsKeyFile)
		if err != nil {
			return nil, config.Invalid(FlagKeyFile, "%v", err)
		}
		r, err := ParseKeys(string(b))
		if err != nil {
			return nil, config.Invalid(FlagKeyFile, "%s: %v", c.SecretsKeyFile, err)
		}
		return r, nil
	case c.SecretsKey != "":
		r, err := ParseKeys(c.SecretsKey)
		if err != nil {
			return nil, config.Invalid(EnvKey, "%v", err)
		}
		return r, nil
	}
	return nil, config.Invalid(EnvKey, "no keys configured")
}
