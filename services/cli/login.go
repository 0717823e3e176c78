package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/term"
)

const loginUsage = `usage: conch login [--server URL] [--api-key KEY]

Stores the router's URL and an API key in the user's config directory
(conch/config.json there, readable by its owner only), where every client
command finds them: a key given by --api-key or CONCH_API_KEY still comes
first, and the stored key is only ever sent to the stored server. Without
--api-key the key is read from the first line of stdin, so that it stays
out of the shell's history:

  conch login --server https://conch.example.com < key.txt

The key is checked against the server before it is stored.
conch logout removes the file.
`

const logoutUsage = `usage: conch logout

Removes the router URL and API key that conch login stored.
`

var loginGroup = &group{
	name:    "login",
	summary: "store the router URL and an API key for the client commands",
	usage:   loginUsage,
	flags:   func(string) *flag.FlagSet { return new(Options).loginFlagSet("") },
}

var logoutGroup = &group{
	name:    "logout",
	summary: "remove the router URL and API key conch login stored",
	usage:   logoutUsage,
	flags:   func(string) *flag.FlagSet { return flag.NewFlagSet("conch logout", flag.ContinueOnError) },
}

// loginFlagSet is conch login's flag set, bound to o: what the command
// parses and what its help lists. It takes only the server and the key
// to store, each described as login uses it.
func (o *Options) loginFlagSet(string) *flag.FlagSet {
	fs := flag.NewFlagSet("conch login", flag.ContinueOnError)
	fs.StringVar(&o.Server, "server", "", "router `URL` to store (env CONCH_URL, else "+DefaultServer+")")
	fs.StringVar(&o.APIKey, "api-key", "", "API `KEY` to store (env CONCH_API_KEY, else the first line of stdin)")
	return fs
}

// Credentials are what conch login stores.
type Credentials struct {
	Server string `json:"server"`
	APIKey string `json:"api_key"`
}

// CredentialsPath is where conch login stores the credentials: conch/
// config.json in the user's config directory ($XDG_CONFIG_HOME or
// ~/.config on Linux).
func CredentialsPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("config directory: %w", err)
	}
	return filepath.Join(dir, "conch", "config.json"), nil
}

// loadCredentials reads the stored credentials; none stored is no error.
func loadCredentials() (Credentials, error) {
	var c Credentials
	path, err := CredentialsPath()
	if err != nil {
		return c, nil // no config directory: nothing was stored
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("read %s: %w (conch login writes it anew)", path, err)
	}
	c.Server = strings.TrimRight(c.Server, "/")
	return c, nil
}

// saveCredentials writes c for the user's eyes only: the directory 0700,
// the file 0600, replaced whole so that no reader sees half of it.
func saveCredentials(c Credentials) (string, error) {
	path, err := CredentialsPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.json")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return "", err
	}
	// CreateTemp makes the file 0600 already; said again, as it is the
	// point.
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}

// Login runs `conch login`.
func Login(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	o := Options{Output: "text"}
	if _, _, err := loginGroup.parse(stdout, args, o.loginFlagSet); err != nil {
		return err
	}
	if o.Server == "" {
		o.Server = envOr("CONCH_URL", DefaultServer)
	}
	if o.APIKey == "" {
		o.APIKey = os.Getenv("CONCH_API_KEY")
	}
	if o.APIKey == "" {
		key, err := readKey(stdin, stderr)
		if err != nil {
			return err
		}
		o.APIKey = key
	}
	if o.APIKey == "" {
		return &UsageError{Cmd: "conch login", Msg: "no API key: give --api-key or the key on stdin (see 'conch login --help')"}
	}
	c, err := NewClient(&o)
	if err != nil {
		return err
	}
	// A key the server refuses is not stored, so that the next command
	// does not fail later for a reason said less clearly.
	if err := c.JSON(ctx, "GET", "/api/v1/gateways", nil, nil); err != nil {
		var api *APIError
		if errors.As(err, &api) && api.Status == http.StatusUnauthorized {
			return fmt.Errorf("%s refused the key: %w", c.base, err)
		}
		if !errors.As(err, &api) {
			return fmt.Errorf("%s did not answer: %w", c.base, err)
		}
	}
	path, err := saveCredentials(Credentials{Server: c.base, APIKey: c.key})
	if err != nil {
		return fmt.Errorf("store credentials: %w", err)
	}
	fmt.Fprintf(stdout, "logged in to %s; key stored in %s\n", c.base, path)
	return nil
}

// readKey reads the key from the first line of stdin: on a terminal asked
// for and not echoed.
func readKey(stdin io.Reader, stderr io.Writer) (string, error) {
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(stderr, "API key: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(stderr)
		if err != nil {
			return "", fmt.Errorf("read the key: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the key: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// Logout runs `conch logout`.
func Logout(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if _, _, err := logoutGroup.parse(stdout, args, logoutGroup.flags); err != nil {
		return err
	}
	path, err := CredentialsPath()
	if err != nil {
		return err
	}
	switch err := os.Remove(path); {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintln(stdout, "not logged in")
		return nil
	case err != nil:
		return fmt.Errorf("remove credentials: %w", err)
	}
	fmt.Fprintf(stdout, "logged out: removed %s\n", path)
	return nil
}
