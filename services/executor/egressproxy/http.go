package egressproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

type roundTripper interface {
	RoundTrip(*http.Request) (*http.Response, error)
}

// newTransport is the session's client for absolute-form requests: every
// connection it makes goes through the policy and address checks.
func (s *session) newTransport() *http.Transport {
	t := &http.Transport{
		Proxy:           nil,
		TLSClientConfig: &tls.Config{RootCAs: s.p.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, err := splitHostPort(addr, 80)
			if err != nil {
				return nil, err
			}
			up, done, err := s.connect(ctx, "http", host, port)
			if err != nil {
				return nil, err
			}
			return s.counted(up, done), nil
		},
		TLSHandshakeTimeout: tlsHandshakeTimeout,
		// One upstream connection per request: a connection is reported
		// (Policy.OnConnection) with the command that made it, not when
		// an idle pool lets it go.
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: responseHeaderTimeout,
	}
	s.rt = t
	return t
}

// responseHeaderTimeout bounds the wait for an upstream's answer.
const responseHeaderTimeout = 5 * time.Minute

// hopHeaders are a proxy's own, never forwarded.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// http serves HTTP proxy requests on c: CONNECT tunnels and absolute-form
// requests, until the client closes or a tunnel takes the connection.
func (s *session) http(ctx context.Context, c net.Conn, br *bufio.Reader) {
	for {
		_ = c.SetReadDeadline(time.Now().Add(s.p.cfg.HandshakeTimeout))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.Method == http.MethodConnect {
			host, port, err := splitHostPort(req.Host, 443)
			if err != nil {
				writeError(c, http.StatusBadRequest, "conch: CONNECT needs host:port, got "+strconv.Quote(req.Host))
				return
			}
			if s.pol.CA != nil && len(s.secretsFor(host)) > 0 {
				if err := s.check(ctx, host, port); err != nil {
					s.refuse(ctx, host, port, err)
					writeDialError(c, err)
					return
				}
				if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
					return
				}
				s.intercept(ctx, c, br, host, port)
				return
			}
			up, done, err := s.connect(ctx, "connect", host, port)
			if err != nil {
				writeDialError(c, err)
				return
			}
			s.track(up)
			if _, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
				s.untrack(up)
				done(0, 0, nil)
				return
			}
			sent, received := s.tunnel(c, br, up)
			s.untrack(up)
			done(sent, received, nil)
			return
		}
		if !s.forward(ctx, c, req) {
			return
		}
	}
}

// forward proxies one absolute-form request; it reports whether the
// client connection may carry another.
func (s *session) forward(ctx context.Context, c net.Conn, req *http.Request) bool {
	if !req.URL.IsAbs() || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		writeError(c, http.StatusBadRequest, "conch: this is a proxy: ask for an absolute http:// URL, or CONNECT for https")
		return false
	}
	def := 80
	if req.URL.Scheme == "https" {
		def = 443
	}
	host, port, err := splitHostPort(req.URL.Host, def)
	if err != nil {
		writeError(c, http.StatusBadRequest, "conch: bad host "+strconv.Quote(req.URL.Host))
		return false
	}
	// Refuse before reading the body or touching the transport.
	if err := s.check(ctx, host, port); err != nil {
		s.refuse(ctx, host, port, err)
		writeDialError(c, err)
		return !req.Close && drain(req)
	}
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	// A secret's value goes only where TLS verified for its domain
	// takes it: never in cleartext, and never on a connection that
	// anything but sendSecrets made.
	secrets, err := carriesSecrets(s.pol, host, port, req.Header)
	if err == nil && secrets && req.URL.Scheme != "https" {
		err = &Cleartext{Domain: canonical(host)}
	}
	if err != nil {
		s.refuse(ctx, host, port, err)
		writeDialError(c, err)
		return false
	}
	// The answer may have taken a human's time; the body is read now.
	_ = c.SetReadDeadline(time.Now().Add(s.p.cfg.HandshakeTimeout))
	req.RequestURI = ""
	// The host that was judged is the host asked: a different Host
	// header would reach another site behind the same address.
	req.Host = req.URL.Host
	var resp *http.Response
	if secrets {
		resp, err = s.sendSecrets(ctx, req, host, port)
	} else {
		resp, err = s.rt.RoundTrip(req.WithContext(ctx))
	}
	if err != nil {
		writeDialError(c, err)
		return false
	}
	resp.Header.Del("Keep-Alive")
	err = resp.Write(c)
	_ = resp.Body.Close()
	return err == nil && !req.Close && !resp.Close
}

// drain reads a refused request's body so that the next request can be
// read; a large one ends the connection instead.
func drain(req *http.Request) bool {
	if req.Body == nil {
		return true
	}
	defer req.Body.Close()
	buf := make([]byte, 4096)
	var n int64
	for n < 1<<20 {
		k, err := req.Body.Read(buf)
		n += int64(k)
		if err != nil {
			return true
		}
	}
	return false
}

// writeDialError answers a connection that was not made: 403 for a
// refusal (a secret in cleartext among them), 502 for a failure.
func writeDialError(c net.Conn, err error) {
	var r *Refused
	if errors.As(err, &r) {
		writeError(c, http.StatusForbidden, r.Error())
		return
	}
	var clear *Cleartext
	if errors.As(err, &clear) {
		writeError(c, http.StatusForbidden, clear.Error())
		return
	}

	var l *Limited
	if errors.As(err, &l) {
		writeError(c, http.StatusTooManyRequests, l.Error())
		return
	}
	writeError(c, http.StatusBadGateway, err.Error())
}

// writeError writes a plain-text response the model can read, from curl
// -v, python's urllib or any client that shows the body.
func writeError(c net.Conn, status int, msg string) {
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	body := msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nX-Conch-Error: %s\r\n\r\n%s",
		status, http.StatusText(status), len(body), headerSafe(msg), body)
	_ = c.SetWriteDeadline(time.Time{})
}

func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// splitHostPort splits "host:port" or "host" (taking def), with IPv6
// literals in brackets.
func splitHostPort(hp string, def int) (string, int, error) {
	host, portS, err := net.SplitHostPort(hp)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]"), def, nil
		}
		return "", 0, err
	}
	port, err := strconv.Atoi(portS)
	if err != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("bad port in %q", hp)
	}
	return host, port, nil
}
