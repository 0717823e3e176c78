package errs

import "testing"

func TestHideAddresses(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]string{
		`transport: Error while dialing: dial tcp 127.0.0.1:41587: connect: connection refused`: `transport: Error while dialing: dial tcp a conch service: connect: connection refused`,
		`dial tcp [fd00::7]:7002: i/o timeout`:                                                  `dial tcp a conch service: i/o timeout`,
		`the executor holding sandbox sb-1 is not reachable; it may be restarting`:              `the executor holding sandbox sb-1 is not reachable; it may be restarting`,
		`workspace quota exceeded: 10 of 10 bytes`:                                              `workspace quota exceeded: 10 of 10 bytes`,
		`Post "http://localhost:2379/v3": conch: outbound to 127.0.0.1:2379 refused: loopback`:  `Post "http://localhost:2379/v3": conch: outbound to 127.0.0.1:2379 refused: loopback`,
		`dial tcp 10.0.0.7:7002: refused; conch: outbound to [::1]:80 refused: loopback`:        `dial tcp a conch service: refused; conch: outbound to [::1]:80 refused: loopback`,
	} {
		if got := HideAddresses(msg); got != want {
			t.Errorf("%q: %q, want %q", msg, got, want)
		}
	}
}
