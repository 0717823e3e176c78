package cli

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"
)

// exposedPort is a port as the REST API answers it.
type exposedPort struct {
	Port      int    `json:"port"`
	Public    bool   `json:"public"`
	ExpiresAt string `json:"expires_at,omitempty"`
	URL       string `json:"url"`
}

// ports runs conch sandbox expose, ports and unexpose.
func ports(ctx context.Context, c *Client, cmd string, pos []string, f *sandboxFlags, asJSON bool, stdout io.Writer) error {
	base := "/api/v1/sandboxes/" + url.PathEscape(pos[0]) + "/ports"
	switch cmd {
	case "expose":
		port, err := strconv.Atoi(pos[1])
		if err != nil {
			return fmt.Errorf("port %q: must be a number", pos[1])
		}
		var p exposedPort
		if err := c.JSON(ctx, "POST", base, map[string]any{"port": port, "public": f.public, "expires_in_seconds": f.expires}, &p); err != nil {
			return err
		}
		if asJSON {
			return PrintJSON(stdout, p)
		}
		_, err = fmt.Fprintln(stdout, p.URL)
		return err
	case "ports":
		var out struct {
			Ports []exposedPort `json:"ports"`
		}
		if err := c.JSON(ctx, "GET", base, nil, &out); err != nil {
			return err
		}
		if asJSON {
			return PrintJSON(stdout, out)
		}
		for _, p := range out.Ports {
			kind, exp := "private", p.ExpiresAt
			if p.Public {
				kind = "public"
			}
			if exp == "" {
				exp = "-"
			}
			fmt.Fprintf(stdout, "%d\t%s\t%s\t%s\n", p.Port, kind, exp, p.URL)
		}
		return nil
	}
	return c.JSON(ctx, "DELETE", base+"/"+url.PathEscape(pos[1]), nil, nil)
}
